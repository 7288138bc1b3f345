"""`campaign classify LOGFILE`: a fixture log through the real command (subprocess), its exit codes."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.paths import ROOT

LOGS = ROOT / "tests" / "fixtures" / "logs"


def classify(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "classify", *args],
        cwd=ROOT,
        env=env,
        input=input,
        capture_output=True,
        text=True,
        timeout=120,
    )


def fields(stdout: str) -> dict[str, str]:
    out = {}
    for line in stdout.splitlines():
        label, _, value = line.partition(":")
        out[label.strip()] = value.strip()
    return out


def test_a_matching_log_prints_cause_verdict_reason_binding_and_evidence():
    r = classify(str(LOGS / "symm_mem_keyerror_sm120.log"), "--exit-code", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    got = fields(r.stdout)
    assert got["cause"].startswith("torch symmetric memory has no entry for SM 12")
    assert got["signature"] == "symm_mem_sm_keyerror"
    assert got["proposed"] == "dead_end (approach status: dead_end)"
    assert "lookup table lacks SM 12" in got["reason"]  # one line: no wrapping at 80 columns
    assert got["bound to"] == "torch, SM"
    assert got["evidence"] == "KeyError: 12"


def test_stdin_and_a_retest_verdict_that_parks_the_approach():
    text = (LOGS / "unknown_flag_sglang059.log").read_text()
    r = classify("-", "--exit-code", "2", input=text)
    assert r.returncode == 0, r.stderr
    got = fields(r.stdout)
    assert got["proposed"] == "retest (approach status: deferred)"
    assert got["bound to"] == "sglang"
    # Log text is printed as is, never read as rich markup.
    assert "unrecognized arguments: --flashinfer-allreduce-fusion-backend auto" in got["evidence"]


def test_signal_and_unbound_verdict():
    r = classify(str(LOGS / "killed_oom_killer.log"), "--signal", "9")
    assert r.returncode == 0, r.stderr
    got = fields(r.stdout)
    assert got["signature"] == "killed_by_signal"
    assert got["proposed"] == "inconclusive (approach status: untested)"
    assert got["bound to"].startswith("not bound")


def test_a_raw_sglang_log_killed_while_capturing_cuda_graphs_is_a_readiness_stall():
    for flag in (("--signal", "9"), ("--timed-out",)):
        r = classify(str(LOGS / "sglang_raw_stall_capturing.log"), *flag)
        assert r.returncode == 0, r.stdout + r.stderr
        got = fields(r.stdout)
        assert got["cause"] == "readiness stall at CUDA graph capture (Capturing batches 1/36)", flag
        assert got["signature"] == "readiness_stall"
        assert got["proposed"].startswith("inconclusive")


def test_brackets_in_a_log_line_are_not_markup():
    r = classify("-", input="[rank0]: torch symm_mem init\n[bold]x[/bold]\nKeyError: 12\n")
    assert r.returncode == 0, r.stderr
    assert fields(r.stdout)["evidence"] == "KeyError: 12"
    r = classify("-", input="[rank0]: [red]ModuleNotFoundError: No module named 'mscclpp'\n")
    assert r.returncode == 0
    assert fields(r.stdout)["evidence"] == "[rank0]: [red]ModuleNotFoundError: No module named 'mscclpp'"


def test_no_signature_exits_1():
    r = classify(str(LOGS / "healthy_server_bench.log"), "--exit-code", "0")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "no known failure signature" in r.stdout


def test_unreadable_file_exits_2(tmp_path):
    r = classify(str(tmp_path / "missing.log"))
    assert r.returncode == 2
    assert "cannot read" in r.stderr and "missing.log" in r.stderr
    r = classify(str(tmp_path))  # a directory
    assert r.returncode == 2


def test_baseline_reads_the_bench_serving_summary_and_proposes_slower_than_baseline():
    r = classify(str(LOGS / "bench_serving_summary_slow.log"), "--baseline", "82", "--exit-code", "0")
    assert r.returncode == 0, r.stdout + r.stderr
    got = fields(r.stdout)
    assert got["signature"] == "slower_than_baseline"
    assert got["cause"] == "slower than baseline: 38 tok/s vs 82 tok/s baseline"
    # At or above the baseline: nothing to propose.
    assert classify(str(LOGS / "bench_serving_summary_slow.log"), "--baseline", "38").returncode == 1


def test_baseline_without_a_throughput_in_the_log_is_a_clear_error():
    r = classify(str(LOGS / "port_in_use.log"), "--baseline", "82")
    assert r.returncode == 2
    assert "no output throughput" in r.stdout + r.stderr
    assert classify(str(LOGS / "port_in_use.log"), "--baseline", "-3").returncode == 2
