"""Failure signatures against realistic logs (tests/fixtures/logs), with a negative case for each."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.domain.signatures import SIGNATURES, Classification, classify
from app.protocol.metrics import parse_metric_line
from app.protocol.preflight import PROPOSABLE_STATUSES

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def log(name: str) -> str:
    return (LOGS / name).read_text()


def hit(log_text: str, **kwargs) -> Classification:
    """classify() where the test expects a signature to match."""
    found = classify(log_text, **kwargs)
    assert found is not None
    return found


def metrics_of(text: str) -> list[dict]:
    return [m for m in map(parse_metric_line, text.splitlines()) if m]


@pytest.mark.parametrize(
    ("fixture", "exit_code", "signature", "verdict", "bound", "evidence"),
    [
        ("symm_mem_keyerror_sm120.log", 1, "symm_mem_sm_keyerror", "dead_end", ["torch", "sm"], "KeyError: 12"),
        (
            "flashinfer_jit_sm120.log",
            1,
            "jit_no_sm_target",
            "dead_end",
            ["cuda", "sm"],
            "nvcc fatal   : Unsupported gpu architecture 'compute_120a'",
        ),
        (
            "cuda_oom_nccl_channels.log",
            1,
            "cuda_oom",
            "dead_end",
            None,
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB.",
        ),
        (
            "nccl_watchdog_timeout.log",
            1,
            "nccl_error",
            "inconclusive",
            ["nccl"],
            "Watchdog caught collective operation timeout",
        ),
        (
            "nccl_internal_error.log",
            1,
            "nccl_error",
            "inconclusive",
            ["nccl"],
            "NCCL WARN Cuda failure 'peer access is not supported",
        ),
        (
            "cuda_graph_capture_nccl_tree.log",
            1,
            "cuda_graph_capture",
            "dead_end",
            ["nccl", "torch"],
            "operation not permitted when stream is capturing",
        ),
        (
            "illegal_memory_access.log",
            1,
            "illegal_memory_access",
            "dead_end",
            ["torch", "sglang", "sm"],
            "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
        ),
        (
            "unknown_flag_sglang059.log",
            1,
            "unknown_flag",
            "retest",
            ["sglang"],
            "launch_server.py: error: unrecognized arguments: --flashinfer-allreduce-fusion-backend auto",
        ),
        (
            "mscclpp_not_installed.log",
            1,
            "module_not_installed",
            "deferred",
            None,
            "ModuleNotFoundError: No module named 'mscclpp'",
        ),
        (
            "readiness_timeout.log",
            3,
            "readiness_timeout",
            "inconclusive",
            None,
            "sglang_server: server not ready within 1800s",
        ),
        ("port_in_use.log", 1, "port_in_use", "retest", None, "OSError: [Errno 98] Address already in use"),
        ("readiness_stall_capturing.log", 3, "readiness_stall", "inconclusive", None, "1/36"),
        (
            "segfault_core_dumped.log",
            1,
            "segfault",
            "inconclusive",
            ["torch", "sglang"],
            "Fatal Python error: Segmentation fault",
        ),
    ],
)
def test_fixture_is_classified(fixture, exit_code, signature, verdict, bound, evidence):
    found = classify(log(fixture), exit_code=exit_code)
    assert found is not None, fixture
    assert found.signature == signature
    assert found.verdict == verdict
    assert found.bound_to == ({"components": bound} if bound else None)
    assert found.evidence_line is not None
    assert evidence in found.evidence_line
    assert found.evidence_line.strip()[:120] in found.reason  # the reason quotes its evidence


def test_the_campaign_causes_read_as_the_campaign_recorded_them():
    assert hit(log("symm_mem_keyerror_sm120.log"), exit_code=1).cause.startswith(
        "torch symmetric memory has no entry for SM 12"
    )
    assert hit(log("unknown_flag_sglang059.log"), exit_code=2).cause == (
        "flag not supported by this sglang: --flashinfer-allreduce-fusion-backend auto"
    )
    assert hit(log("mscclpp_not_installed.log"), exit_code=1).cause == "mscclpp not installed; needs a build"
    assert hit(log("cuda_oom_nccl_channels.log"), exit_code=1).cause == (
        "CUDA out of memory (tried to allocate 1.75 GiB)"
    )


def test_slower_than_baseline_is_a_dead_end_not_bound_to_the_stack():
    text = log("bench_custom_ar_pcie.log")
    found = hit(text, exit_code=0, metrics=metrics_of(text), baseline={"output_throughput_tok_s": 82.0})
    assert found is not None
    assert (found.signature, found.verdict, found.bound_to) == ("slower_than_baseline", "dead_end", None)
    assert found.cause == "slower than baseline: 38 tok/s vs 82 tok/s baseline"


def test_faster_than_baseline_or_no_baseline_is_no_failure():
    text = log("healthy_server_bench.log")
    assert classify(text, exit_code=0, metrics=metrics_of(text), baseline={"output_throughput_tok_s": 82.0}) is None
    slow = log("bench_custom_ar_pcie.log")
    assert classify(slow, exit_code=0, metrics=metrics_of(slow), baseline=None) is None
    # Within the 2% margin of the baseline is not "slower".
    assert (
        classify(
            "",
            exit_code=0,
            metrics=[{"name": "output_throughput_tok_s", "value": 81.0}],
            baseline={"output_throughput_tok_s": 82.0},
        )
        is None
    )


def test_killed_by_signal_without_other_cause():
    found = hit(log("killed_oom_killer.log"), exit_code=None, signal=9)
    assert (found.signature, found.verdict, found.evidence_line) == ("killed_by_signal", "inconclusive", "Killed")
    assert hit("loading shards 41%\n", exit_code=137).signature == "killed_by_signal"
    cancelled = hit("step 3\n", signal=15)
    assert cancelled.signature == "killed_by_signal" and "signal 15" in cancelled.cause


# --- negative cases ---------------------------------------------------------------------------


def test_healthy_run_is_not_a_failure():
    # It says "to avoid CUDA out of memory" in a hint: advice is not an error.
    assert classify(log("healthy_server_bench.log"), exit_code=0) is None


def test_keyerror_12_outside_symmetric_memory_is_not_an_sm_failure():
    assert classify(log("keyerror_unrelated.log"), exit_code=1) is None


def test_a_jit_build_that_targets_sm120_and_succeeds_is_not_a_failure():
    assert classify(log("flashinfer_jit_ok.log"), exit_code=0) is None


def test_each_signature_needs_its_evidence():
    assert (
        classify("usage: launch_server.py [-h]\nerror: the following arguments are required: --model-path", exit_code=2)
        is None
    )
    assert classify("ModuleNotFoundError is raised when ...", exit_code=1) is None
    assert classify("NCCL INFO Channel 00/02 : 0 1\nNCCL INFO Connected all rings", exit_code=0) is None
    assert classify("sglang_server: phase waiting for ready\n", exit_code=0) is None
    assert classify("listening on 127.0.0.1:30000", exit_code=0) is None


# --- order: the most specific evidence wins -----------------------------------------------------


def test_symm_mem_keyerror_wins_over_the_nccl_noise_and_readiness_it_causes():
    text = log("symm_mem_keyerror_sm120.log") + log("readiness_timeout.log") + log("nccl_watchdog_timeout.log")
    assert hit(text, exit_code=1).signature == "symm_mem_sm_keyerror"


def test_oom_wins_over_the_nccl_warnings_that_follow_it():
    assert "NCCL WARN" in log("cuda_oom_nccl_channels.log")
    assert hit(log("cuda_oom_nccl_channels.log"), exit_code=1).signature == "cuda_oom"


def test_graph_capture_and_illegal_access_win_over_nccl():
    assert hit(log("cuda_graph_capture_nccl_tree.log"), exit_code=1).signature == "cuda_graph_capture"
    assert hit(log("illegal_memory_access.log"), exit_code=1).signature == "illegal_memory_access"


def test_a_cause_in_the_log_wins_over_the_kill_signal():
    assert hit(log("cuda_oom_nccl_channels.log"), exit_code=None, signal=9).signature == "cuda_oom"


def test_a_failed_trial_is_never_called_slower_than_baseline():
    text = log("bench_custom_ar_pcie.log")
    found = classify(text, exit_code=1, metrics=metrics_of(text), baseline={"output_throughput_tok_s": 82.0})
    assert found is None


def test_signature_table_is_complete_and_verdicts_valid():
    names = [name for name, _ in SIGNATURES]
    assert len(names) == len(set(names)) and len(names) >= 12
    for fixture in LOGS.glob("*.log"):
        found = classify(fixture.read_text(), exit_code=1)
        assert found is None or found.verdict in PROPOSABLE_STATUSES


def test_readiness_wording_is_the_recipes_own():
    from app.protocol.sglang_output import READY_LINE
    from runners.recipes.sglang_server import READY_TIMEOUT_MESSAGE

    line = READY_TIMEOUT_MESSAGE.format(timeout=42.5, ready_line=READY_LINE)
    found = hit(f"sglang_server: phase waiting for ready\n{line}\n", exit_code=3)
    assert found.signature == "readiness_timeout" and found.cause == "server not ready within 42.5s"


# --- stalls, segfaults, preflight, the baseline from a bench summary ----------------------------


def test_a_stall_names_the_phase_it_stopped_in():
    found = hit(log("readiness_stall_capturing.log"), exit_code=3)
    assert found.cause == "readiness stall at CUDA graph capture (Capturing batches 1/36)"
    assert "printed nothing for its last 1694s" in found.reason


def test_a_server_still_printing_when_time_ran_out_is_a_timeout_not_a_stall():
    text = log("readiness_stall_capturing.log").replace("came 1694s before", "came 3s before")
    assert hit(text, exit_code=3).signature == "readiness_timeout"
    # No phase line at the end (an unknown last line): a timeout, with no phase made up.
    odd = log("readiness_stall_capturing.log").replace("Capturing batches", "Doing something")
    odd = odd.replace("Capture cuda graph begin", "Something else")
    assert hit(odd, exit_code=3).signature == "readiness_timeout"


def test_a_raw_server_log_killed_in_a_startup_phase_is_a_readiness_stall():
    """A log pasted straight from SGLang 0.5.23 (no recipe lines): killed or timed out while its last line is
    a startup phase, it names that phase; the same log ending by itself, or killed by the host's OOM killer,
    does not."""
    raw = log("sglang_raw_stall_capturing.log")
    for how in ({"signal": 9}, {"signal": 15}, {"exit_code": 137}, {"timed_out": True}):
        found = classify(raw, **how)
        assert found is not None and found.signature == "readiness_stall", how
        assert found.cause == "readiness stall at CUDA graph capture (Capturing batches 1/36)"
        assert found.evidence_line is not None
        assert found.verdict == "inconclusive" and found.evidence_line.startswith("Capturing batches (bs=64")
    assert "killed (SIGKILL)" in hit(raw, signal=9).reason
    assert "at its time limit" in hit(raw, signal=15, timed_out=True).reason
    assert classify(raw, exit_code=1) is None  # ended by itself: nothing says it stalled
    oom = raw + "Killed\n"
    assert hit(oom, signal=9).signature == "killed_by_signal"
    # Each earlier startup phase, as SGLang prints it, names itself when it is the last line.
    lines = raw.splitlines()
    for last, phase in (
        ("Capture target verify CUDA graph begin", "CUDA graph capture"),
        ("Memory pool end", "after the KV cache allocation"),
        ("Load weight end", None),  # weights loaded: not a phase the server can be stuck in by this line
        ("Loading safetensors checkpoint shards:   0%", "weight loading (checkpoint shards 0/64)"),
        ("Load weight begin", "weight loading"),
        ("Init parallel begin", "torch distributed init"),
    ):
        cut = next(i for i, line in enumerate(lines) if last in line)
        found = hit("\n".join(lines[: cut + 1]) + "\n", signal=9)
        if phase is None:
            assert found.signature == "killed_by_signal", last
        else:
            assert found.cause == f"readiness stall at {phase}", last


def test_segfault_from_the_exit_status_alone_and_negative_cases():
    assert hit("step 3\n", exit_code=139).signature == "segfault"
    assert hit("step 3\n", signal=11).signature == "segfault"
    assert classify("the segmentation of the batch is fixed\n", exit_code=1) is None
    assert classify("ulimit -c unlimited; core dumps enabled\n", exit_code=0) is None


def test_preflight_failure_carries_the_checks_own_proposal():
    text = (
        "    launch_server.py: error: unrecognized arguments: --enable-torch-symm-mem\n"
        "preflight: sglang_flags: FAILED in 3.0s: sglang 0.5.9 does not know --enable-torch-symm-mem\n"
        '@@campaign-preflight {"bound_to": ["sglang"], "cause": "flag not supported by this sglang: '
        '--enable-torch-symm-mem", "check": "sglang_flags", "sglang_version": "0.5.9", "summary": "s", '
        '"verdict": "retest"}\n'
    )
    found = hit(text, exit_code=4)
    assert (found.signature, found.verdict, found.bound_to) == (
        "preflight_failed",
        "retest",
        {"components": ["sglang"]},
    )
    assert found.evidence_line is not None
    assert "(sglang 0.5.9)" in found.reason and "unrecognized arguments" in found.evidence_line
    # A malformed or verdict-less record is not a proposal.
    assert classify('@@campaign-preflight {"check": "x", "verdict": "maybe", "cause": "c"}\n', exit_code=4) is None
    assert classify("@@campaign-preflight {not json\n", exit_code=4) is None


def test_baseline_read_from_the_bench_serving_summary():
    from app.domain.signatures import metrics_from_log

    text = log("bench_serving_summary_slow.log")
    metrics = metrics_from_log(text)
    assert {m["name"]: m["value"] for m in metrics}["output_throughput_tok_s"] == 38.0
    found = hit(text, exit_code=0, metrics=metrics, baseline={"output_throughput_tok_s": 82.0})
    assert (
        found.signature == "slower_than_baseline"
        and found.cause == "slower than baseline: 38 tok/s vs 82 tok/s baseline"
    )
    assert classify(text, exit_code=0, metrics=metrics, baseline={"output_throughput_tok_s": 38.5}) is None
