"""Preflight: each check's pass and fail paths, and the seed campaign's three dead ends reached before launch.

Real processes: the sglang_server recipe, its probes under the node's interpreter. Where a GPU is needed
the node is the stand-in (tests/standins/sglang_standin.py, $SGLANG_STANDIN_NODE); on this CPU machine
the real probes run too and must fail cleanly ("no CUDA GPU visible").
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from app.domain.signatures import Classification, classify
from app.protocol.preflight import parse_preflight_line
from app.protocol.recipes import RecipeError
from runners.preflight import REGISTRY, Context, Outcome, check_names, register, run_checks
from runners.preflight.checks import nccl_env_problems
from runners.recipes import build_launch
from runners.recipes.sglang_server import validate
from tests.support.net import free_port
from tests.support.paths import ROOT
from tests.support.recipes import run_spec

STANDIN = str(ROOT / "tests" / "standins" / "sglang_standin.py")
MODEL = str(ROOT / "tests" / "fixtures" / "models" / "tiny")
# A full launch on the stand-in takes this long before it is ready: "minutes of weight loading".
SLOW_LOAD = {"SGLANG_STANDIN_READY_DELAY_S": "600"}


def recipe(port: int, flags: list[str], **params):
    base = {
        "model_path": MODEL,
        "tp_size": 8,
        "sglang_python": STANDIN,
        "port": port,
        "flags": flags,
        "teardown_grace_s": 2,
        "ready_timeout_s": 900,
        "bench": {"tool": "none"},
    }
    base.update(params)
    return {"kind": "sglang_server", "params": base, "timeout_s": 900}


def run(tmp_path: Path, flags: list[str], env: dict, **params) -> subprocess.CompletedProcess:
    spec = build_launch(recipe(free_port(), flags, **params))
    spec.env.update({"SGLANG_STANDIN_PIDFILE": str(tmp_path / "pids"), **SLOW_LOAD, **env})
    return run_spec(spec, timeout=60)


def preflight_record(stdout: str) -> dict:
    records = [r for r in map(parse_preflight_line, stdout.splitlines()) if r]
    assert len(records) == 1, stdout
    return records[0]


def assert_never_launched(done: subprocess.CompletedProcess, tmp_path: Path) -> None:
    assert done.returncode == 4, done.stdout + done.stderr
    assert "@@campaign-phase preflight" in done.stdout
    assert "@@campaign-phase launching" not in done.stdout
    assert "Load weight begin" not in done.stdout  # no weights loaded
    assert not (tmp_path / "pids").exists()  # the stand-in server process never started
    assert "sglang_server: preflight failed; the server was not launched" in done.stdout


def classified(text: str, exit_code: int) -> Classification:
    found = classify(text, exit_code=exit_code)
    assert found is not None, text
    return found


# --- the seed's three dead ends ------------------------------------------------------------------


def test_unknown_torch_symm_mem_flag_on_an_old_sglang(tmp_path):
    done = run(
        tmp_path,
        ["--enable-torch-symm-mem"],
        {"SGLANG_STANDIN_VERSION": "0.5.9", "SGLANG_STANDIN_MISSING_FLAGS": "--enable-torch-symm-mem"},
    )
    assert_never_launched(done, tmp_path)
    assert "launch_server.py: error: unrecognized arguments: --enable-torch-symm-mem" in done.stdout
    assert "re-test with an sglang that has it" in done.stdout
    record = preflight_record(done.stdout)
    assert (record["check"], record["sglang_version"]) == ("sglang_flags", "0.5.9")
    found = classified(done.stdout, exit_code=4)
    assert (found.signature, found.verdict, found.bound_to) == (
        "preflight_failed",
        "retest",
        {"components": ["sglang"]},
    )
    assert found.cause == "flag not supported by this sglang: --enable-torch-symm-mem"
    assert "(sglang 0.5.9)" in found.reason
    assert (
        found.evidence_line or ""
    ).strip() == "launch_server.py: error: unrecognized arguments: --enable-torch-symm-mem"


def test_symm_mem_keyerror_12_on_sm120(tmp_path):
    done = run(tmp_path, ["--enable-torch-symm-mem"], {"SGLANG_STANDIN_NODE": "rtxpro6000-torch210"})
    assert_never_launched(done, tmp_path)
    assert "preflight: sglang_flags: ok" in done.stdout  # 0.5.9 stand-in knows the flag: it got further
    assert "    KeyError: 12" in done.stdout
    found = classified(done.stdout, exit_code=4)
    assert (found.signature, found.verdict, found.bound_to) == (
        "preflight_failed",
        "dead_end",
        {"components": ["torch", "sm"]},
    )
    assert found.cause.startswith("torch symmetric memory has no entry for SM 12")
    assert (found.evidence_line or "").strip() == "KeyError: 12"


def test_flashinfer_jit_has_no_compute_120a_target(tmp_path):
    done = run(tmp_path, ["--enable-flashinfer-allreduce-fusion"], {"SGLANG_STANDIN_NODE": "rtxpro6000-torch210"})
    assert_never_launched(done, tmp_path)
    assert "nvcc fatal   : Unsupported gpu architecture 'compute_120a'" in done.stdout
    found = classified(done.stdout, exit_code=4)
    assert (found.signature, found.verdict, found.bound_to) == (
        "preflight_failed",
        "dead_end",
        {"components": ["cuda", "sm"]},
    )
    assert found.cause == "the CUDA compiler cannot target compute_120a"
    assert (found.evidence_line or "").strip() == "nvcc fatal   : Unsupported gpu architecture 'compute_120a'"


def test_on_a_good_node_every_applicable_check_passes_then_the_server_launches(tmp_path):
    done = run(
        tmp_path,
        ["--enable-torch-symm-mem", "--enable-flashinfer-allreduce-fusion"],
        {"SGLANG_STANDIN_READY_DELAY_S": "0.2"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for name in (
        "model_path",
        "port_free",
        "sglang_flags",
        "nccl_env",
        "gpu_memory",
        "jit_target",
        "symm_mem",
        "graph_collective",
    ):
        assert f"preflight: {name}: ok" in done.stdout, name
    assert done.stdout.index("@@campaign-phase preflight") < done.stdout.index("@@campaign-phase launching")
    assert (tmp_path / "pids").exists()


def test_preflight_can_be_skipped_per_approach_and_per_check(tmp_path):
    off = run(
        tmp_path,
        ["--enable-torch-symm-mem"],
        {"SGLANG_STANDIN_NODE": "rtxpro6000-torch210", "SGLANG_STANDIN_MODE": "crash"},
        preflight={"enabled": "off"},
    )
    assert "@@campaign-phase preflight" not in off.stdout
    assert off.returncode == 1 and "KeyError: 12" in off.stdout  # the full launch found it instead
    (tmp_path / "pids").unlink()
    skipped = run(
        tmp_path,
        ["--enable-torch-symm-mem"],
        {"SGLANG_STANDIN_NODE": "rtxpro6000-torch210", "SGLANG_STANDIN_READY_DELAY_S": "0.2"},
        preflight={"skip": ["symm_mem"]},
    )
    assert "preflight: symm_mem: skipped (asked by the approach)" in skipped.stdout
    assert skipped.returncode == 0, skipped.stdout


def test_an_unknown_check_to_skip_is_refused_with_the_known_names():
    with pytest.raises(
        RecipeError, match=r"params.preflight.skip: unknown check\(s\) symm_men; expected some of .*symm_mem"
    ):
        build_launch(recipe(30000, [], preflight={"skip": ["symm_men"]}))


# --- each check, pass and fail, on this machine ---------------------------------------------------


def ctx_for(tmp_path: Path, python: str = STANDIN, env: dict | None = None, **values) -> Context:
    base = {"model_path": MODEL, "tp_size": 2, "sglang_python": python, "port": free_port()}
    base.update(values)
    return Context(validate(base), {**os.environ, **(env or {})}, "0.5.23", timeout_s=60)


def only(ctx: Context, name: str) -> Outcome:
    return REGISTRY[name].run(ctx)


def test_model_path_check(tmp_path):
    assert only(ctx_for(tmp_path), "model_path").ok
    assert only(ctx_for(tmp_path, model_path="deepseek-ai/DeepSeek-V3"), "model_path").ok  # a hub id
    missing = only(ctx_for(tmp_path, model_path=str(tmp_path / "nope")), "model_path")
    assert not missing.ok and missing.verdict == "retest" and "is not a directory" in (missing.cause or "")
    (tmp_path / "empty").mkdir()
    assert "has no config.json" in (
        only(ctx_for(tmp_path, model_path=str(tmp_path / "empty")), "model_path").cause or ""
    )


def test_port_check(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        taken = sock.getsockname()[1]
        failed = only(ctx_for(tmp_path, port=taken), "port_free")
        assert not failed.ok and f"port {taken} on 127.0.0.1 is not free" in (failed.cause or "")
    assert only(ctx_for(tmp_path), "port_free").ok


def test_nccl_env_check(tmp_path):
    assert nccl_env_problems(
        {
            "NCCL_ALGO": "^Tree",
            "NCCL_PROTO": "LL128,Simple",
            "NCCL_P2P_LEVEL": "SYS",
            "NCCL_MAX_NCHANNELS": "2",
            "NCCL_ALGO_X": "1",
        }
    ) == ["NCCL_ALGO_X: not a variable NCCL reads (a typo is silently ignored)"]
    assert nccl_env_problems({"NCCL_ALGO": "allreduce:tree;broadcast:ring"}) == []
    bad = nccl_env_problems({"NCCL_ALGO": "Trees", "NCCL_P2P_LEVEL": "FAR", "NCCL_MAX_NCHANNELS": "two"})
    assert bad == [
        "NCCL_ALGO=Trees: unknown algorithm(s) Trees",
        "NCCL_MAX_NCHANNELS=two: expected an integer",
        "NCCL_P2P_LEVEL=FAR: expected one of LOC, NVL, PHB, PIX, PXB, SYS or a number",
    ]
    failed = only(ctx_for(tmp_path, env={"NCCL_MAX_NCHANELS": "2"}), "nccl_env")
    assert not failed.ok and failed.bound_to == ["nccl"] and "NCCL_MAX_NCHANELS" in (failed.cause or "")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    ok = Context(validate({"model_path": MODEL, "sglang_python": STANDIN}), {**clean, "NCCL_ALGO": "Ring"}, None)
    assert only(ok, "nccl_env").ok


def test_sglang_flags_check_pass_and_fail(tmp_path):
    assert only(ctx_for(tmp_path, server_args=["--enable-torch-symm-mem"]), "sglang_flags").ok
    failed = only(ctx_for(tmp_path, server_args=["--enable-frobnication"]), "sglang_flags")
    assert not failed.ok and failed.cause == "flag not supported by this sglang: --enable-frobnication"
    assert "re-test with an sglang that has it" in failed.summary
    no_sglang = only(ctx_for(tmp_path, python=sys.executable), "sglang_flags")  # this venv has no sglang
    assert not no_sglang.ok and no_sglang.verdict == "retest" and "No module named 'sglang'" in no_sglang.output


def test_gpu_memory_check(tmp_path):
    assert only(ctx_for(tmp_path, tp_size=8), "gpu_memory").ok  # stand-in h200: 8 x 139 GiB free
    too_many = only(ctx_for(tmp_path, tp_size=16), "gpu_memory")
    assert not too_many.ok and too_many.cause == "TP 16 needs 16 GPUs; this node has 8"
    big = tmp_path / "big"
    big.mkdir()
    (big / "config.json").write_text("{}")
    with open(big / "model-00001.safetensors", "wb") as fh:  # sparse: 2 TiB of "weights"
        fh.truncate(2 * 2**40)
    short = only(ctx_for(tmp_path, tp_size=8, model_path=str(big)), "gpu_memory")
    assert not short.ok and "not enough free GPU memory for 2048.0 GiB of weights at TP 8" in (short.cause or "")


@pytest.mark.parametrize("name", ["gpu_memory", "symm_mem", "graph_collective", "jit_target"])
def test_gpu_checks_fail_cleanly_without_gpus(tmp_path, name):
    """The real probes, under this machine's torch (CPU): a clear 'retest elsewhere', not a dead end."""
    failed = only(ctx_for(tmp_path, python=sys.executable, server_args=["--enable-torch-symm-mem"]), name)
    assert not failed.ok and failed.verdict == "retest", failed
    assert "no CUDA GPU visible" in (failed.cause or "") and "Traceback" not in failed.output


def test_gpu_checks_through_the_stand_in_cpu_node_run_the_real_probe(tmp_path):
    failed = only(ctx_for(tmp_path, env={"SGLANG_STANDIN_NODE": "cpu"}), "graph_collective")
    # The stand-in runs under the system python3, which has no torch: said so, and "retest", not a dead end.
    assert not failed.ok and failed.verdict == "retest"
    assert "no CUDA GPU visible" in failed.output or "torch is not importable" in failed.output


def test_which_checks_apply():
    plain = Context(validate({"model_path": MODEL, "tp_size": 1, "sglang_python": STANDIN}), {}, None)
    assert not REGISTRY["symm_mem"].applies(plain) and not REGISTRY["jit_target"].applies(plain)
    assert not REGISTRY["graph_collective"].applies(plain)  # one rank: no collective to capture
    tp2 = Context(
        validate(
            {"model_path": MODEL, "tp_size": 2, "sglang_python": STANDIN, "server_args": ["--disable-cuda-graph"]}
        ),
        {},
        None,
    )
    assert not REGISTRY["graph_collective"].applies(tp2)
    ipc = Context(
        validate({"model_path": MODEL, "sglang_python": STANDIN}), {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}, None
    )
    assert REGISTRY["jit_target"].applies(ipc)


def test_a_team_can_register_its_own_check(tmp_path):
    @register("driver_at_least_560")
    def driver_check(ctx: Context) -> Outcome:
        """Our MSCCL++ build needs driver 560."""
        return Outcome.failed("deferred", "driver 550 < 560", bound_to=["driver"], output="nvidia-smi: 550.54")

    try:
        assert check_names()[-1] == "driver_at_least_560"
        out = io.StringIO()
        failed = run_checks(ctx_for(tmp_path), skip=["gpu_memory"], out=out)
        assert failed is not None
        assert failed.cause == "driver 550 < 560"
        text = out.getvalue()
        assert "    nvidia-smi: 550.54\npreflight: driver_at_least_560: FAILED" in text
        assert classified(text, exit_code=4).verdict == "deferred"
        with pytest.raises(ValueError, match="already registered"):
            register("driver_at_least_560")(driver_check)
        with pytest.raises(ValueError, match="verdict must be one of"):
            Outcome.failed("maybe", "x")
    finally:
        REGISTRY.pop("driver_at_least_560")


def test_a_check_that_crashes_is_inconclusive_not_a_dead_end(tmp_path):
    @register("broken")
    def broken(ctx: Context) -> Outcome:
        raise RuntimeError("oops")

    try:
        failed = run_checks(ctx_for(tmp_path), skip=["gpu_memory"], out=io.StringIO())
        assert failed is not None
        assert (failed.verdict, failed.cause) == ("inconclusive", "the check itself failed: RuntimeError: oops")
    finally:
        REGISTRY.pop("broken")


# --- run alone --------------------------------------------------------------------------------------


def test_python_m_runners_preflight_runs_the_checks_alone():
    argv = [
        sys.executable,
        "-m",
        "runners.preflight",
        f"--model-path={MODEL}",
        "--tp-size=8",
        f"--sglang-python={STANDIN}",
        f"--port={free_port()}",
        "--server-arg=--enable-torch-symm-mem",
    ]
    env = {**os.environ, "SGLANG_STANDIN_NODE": "rtxpro6000-torch210", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert done.returncode == 4 and "KeyError: 12" in done.stdout and "launching" not in done.stdout
    env["SGLANG_STANDIN_NODE"] = "h200"
    ok = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "preflight: symm_mem: ok" in ok.stdout and "launching" not in ok.stdout


def test_campaign_preflight_approach_from_the_demo_campaign(tmp_path):
    argv = [
        sys.executable,
        "-m",
        "app.cli",
        "preflight",
        "torch-symm-mem",
        "--file",
        str(ROOT / "app" / "demo" / "kimi-k25-eagle3.yaml"),
        "--sglang-python",
        STANDIN,
        "--model-path",
        MODEL,
        "--draft-model-path",
        MODEL,
    ]
    env = {**os.environ, "SGLANG_STANDIN_NODE": "rtxpro6000-torch210", "NO_COLOR": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert done.returncode == 4, done.stdout + done.stderr
    assert classified(done.stdout, exit_code=4).cause.startswith("torch symmetric memory has no entry for SM 12")
    bad = subprocess.run(
        [*argv[:4], "no-such-approach", *argv[5:]], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT
    )
    assert bad.returncode == 2 and "no approach 'no-such-approach'" in bad.stdout + bad.stderr
