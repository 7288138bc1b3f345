"""The sglang_server recipe against the stand-in SGLang interpreter (tests/standins/sglang_standin.py).

Real processes throughout: the recipe, the stand-in server (a real HTTP server), its helper
child, and the stand-in benchmarks. Nothing here ran against a real SGLang (see docs/recipes.md).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from app.domain.signatures import classify
from app.protocol.sglang_output import READY_LINE, parse_bench_stdout, parse_decode_line, parse_result_json
from runners.recipes import build_launch
from runners.recipes.sglang_server import READY_TIMEOUT_MESSAGE, server_argv, speculative_tags, validate
from tests.support.net import free_port
from tests.support.paths import ROOT
from tests.support.recipes import by_name, metrics, run_spec
from tests.support.waiting import wait_for

STANDIN = str(ROOT / "tests" / "standins" / "sglang_standin.py")
# A model directory preflight accepts (config.json, no weights).
MODEL = str(ROOT / "tests" / "fixtures" / "models" / "tiny")


def recipe(port: int, **params):
    base = {
        "model_path": MODEL,
        "tp_size": 8,
        "sglang_python": STANDIN,
        "port": port,
        "teardown_grace_s": 2,
        "ready_timeout_s": 20,
        "bench": {"tool": "bench_serving", "num_prompts": 4, "input_len": 128, "output_len": 16},
    }
    base.update(params)
    return {"kind": "sglang_server", "params": base, "timeout_s": 120}


def run(port: int, mode: str, tmp_path: Path, env: dict | None = None, **params):
    spec = build_launch(recipe(port, **params))
    spec.env.update({"SGLANG_STANDIN_MODE": mode, "SGLANG_STANDIN_PIDFILE": str(tmp_path / "pids"), **(env or {})})
    return run_spec(spec, timeout=90)


def pids(tmp_path: Path) -> list[int]:
    return [int(p) for p in (tmp_path / "pids").read_text().split()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def assert_gone(pid_list: list[int]) -> None:
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pid_list) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in pid_list)


def test_ready_then_benchmark_metrics_parsed_exactly(tmp_path):
    port = free_port()
    done = run(
        port,
        "ready",
        tmp_path,
        speculative={
            "algorithm": "EAGLE3",
            "draft_model_path": MODEL,
            "num_steps": 3,
            "eagle_topk": 1,
            "num_draft_tokens": 4,
        },
        flags=["--enable-torch-symm-mem"],
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for phase in ("version", "launching", "waiting for ready", "benchmarking", "tearing down"):
        assert f"@@campaign-phase {phase}" in out
    assert "sglang_server: sglang version 0.5.9" in out
    assert READY_LINE in out  # the server's log streams through
    found = metrics(out)
    values = {m["name"]: m["value"] for m in found}
    assert values["output_throughput_tok_s"] == 81.93
    assert values["median_tpot_ms"] == 12.21
    assert values["median_itl_ms"] == 12.05
    assert values["accept_length"] == 2.41
    assert values["server_avg_spec_accept_length"] == 2.37
    assert values["decode_log_accept_len"] == pytest.approx((2.41 + 2.38 + 2.44) / 3)
    assert values["decode_log_gen_throughput_tok_s"] == pytest.approx(82.93)
    tput = by_name(found, "output_throughput_tok_s")[0]
    assert tput["unit"] == "tok/s"
    assert tput["tags"]["sglang_version"] == "0.5.9" and tput["tags"]["source"] == "result_file"
    assert tput["tags"]["speculative_algorithm"] == "EAGLE3" and tput["tags"]["tp_size"] == 8
    # Accept lengths file under the k they ran: 4 draft tokens verified in a chain = k 3 (issue 33 item 3).
    for name in ("accept_length", "server_avg_spec_accept_length", "decode_log_accept_len"):
        tags = by_name(found, name)[0]["tags"]
        assert tags["draft_tokens"] == 3 and tags["speculative_topk"] == 1, (name, tags)
    assert "stopped (SIGTERM)" in out
    assert "GPU release not checked" in out or "GPUs released" in out or "GPUs NOT released" in out
    assert_gone(pids(tmp_path))  # server and its helper child


def test_bench_one_batch_server_without_speculation(tmp_path):
    port = free_port()
    done = run(port, "ready", tmp_path, bench={"tool": "bench_one_batch_server", "input_len": 1024, "output_len": 16})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sglang.bench_one_batch_server" in done.stdout and "--result-filename" in done.stdout
    values = {m["name"]: m["value"] for m in metrics(done.stdout)}
    assert values["output_throughput_tok_s"] == 76.4
    assert "accept_length" not in values  # acc_length -1: no speculation


def test_ready_by_health_endpoint_alone(tmp_path):
    done = run(free_port(), "health_only", tmp_path, bench={"tool": "none"})
    assert done.returncode == 0, done.stdout
    assert READY_LINE not in done.stdout
    assert by_name(metrics(done.stdout), "server_ready_s")


def test_crash_during_startup_reports_last_lines(tmp_path):
    done = run(free_port(), "crash", tmp_path, flags=["--enable-torch-symm-mem"])
    assert done.returncode == 1
    out = done.stdout
    assert "sglang_server: server exited during startup with code 1; its last" in out
    tail = out.split("its last", 1)[1]
    assert "    KeyError: 12" in tail and "torch_symm_mem.py" in tail
    assert "phase benchmarking" not in out
    found = classify(out, exit_code=done.returncode)
    assert found is not None
    assert found.signature == "symm_mem_sm_keyerror" and found.bound_to == {"components": ["torch", "sm"]}
    assert_gone(pids(tmp_path))


def test_unknown_flag_is_reported_as_such(tmp_path):
    """With preflight off the server itself rejects the flag; the classifier still names it."""
    done = run(free_port(), "ready", tmp_path, flags=["--enable-foo"], preflight={"enabled": "off"})
    assert done.returncode == 1
    assert "@@campaign-phase preflight" not in done.stdout
    assert "launch_server.py: error: unrecognized arguments: --enable-foo" in done.stdout
    found = classify(done.stdout, exit_code=done.returncode)
    assert found is not None
    assert found.signature == "unknown_flag" and found.verdict == "retest"
    assert found.cause == "flag not supported by this sglang: --enable-foo"


def test_unknown_flag_is_caught_by_preflight_before_launch(tmp_path):
    done = run(free_port(), "ready", tmp_path, flags=["--enable-foo"])
    assert done.returncode == 4
    assert "@@campaign-phase preflight" in done.stdout and "@@campaign-phase launching" not in done.stdout
    assert not (tmp_path / "pids").exists()  # the stand-in server never started
    assert "launch_server.py: error: unrecognized arguments: --enable-foo" in done.stdout
    found = classify(done.stdout, exit_code=done.returncode)
    assert found is not None
    assert found.signature == "preflight_failed" and found.verdict == "retest"
    assert found.cause == "flag not supported by this sglang: --enable-foo"
    assert found.bound_to == {"components": ["sglang"]}


def test_readiness_timeout(tmp_path):
    done = run(free_port(), "never_ready", tmp_path, ready_timeout_s=1.5)
    assert done.returncode == 3
    line = READY_TIMEOUT_MESSAGE.format(timeout=1.5, ready_line=READY_LINE)
    assert any(ln.startswith(line + "; its last line came ") for ln in done.stdout.splitlines())
    # It had just printed "Load weight begin": quiet for under a minute, so a timeout, not a stall.
    found = classify(done.stdout, exit_code=3)
    assert found is not None and found.signature == "readiness_timeout"
    assert_gone(pids(tmp_path))


def test_teardown_kills_a_group_that_ignores_sigterm(tmp_path):
    done = run(free_port(), "ignore_term", tmp_path, bench={"tool": "none"}, teardown_grace_s=0.5)
    assert done.returncode == 0, done.stdout
    assert "stopped (SIGKILL after SIGTERM grace)" in done.stdout
    assert_gone(pids(tmp_path))


def test_sigterm_to_the_recipe_tears_the_server_down(tmp_path):
    port = free_port()
    spec = build_launch(recipe(port, ready_timeout_s=60))
    env = {
        **os.environ,
        **spec.env,
        "SGLANG_STANDIN_MODE": "never_ready",
        "SGLANG_STANDIN_PIDFILE": str(tmp_path / "pids"),
    }
    log = tmp_path / "recipe.log"
    with open(log, "w") as sink:
        proc = subprocess.Popen(spec.argv, env=env, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, text=True)
    # the server is up (its pids written) and the recipe waits for it to be ready
    wait_for(lambda: (tmp_path / "pids").exists() and "phase waiting for ready" in log.read_text(), timeout=20)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    out = log.read_text()
    assert proc.returncode == 143
    assert "terminated; tearing the server down" in out and "phase tearing down" in out
    assert_gone(pids(tmp_path))


def test_sglang_not_installed_is_classified(tmp_path):
    done = run(free_port(), "not_installed", tmp_path, bench={"tool": "none"}, ready_timeout_s=5)
    assert "No module named 'sglang'" in done.stdout
    assert "sglang version unknown" in done.stdout


# --- argv and parsers ------------------------------------------------------------------------


def test_server_argv_is_a_list_with_every_flag_its_own_element():
    values = validate(
        {
            "model_path": "/m dir/K2.5",
            "tp_size": "8",
            "server_args": ["--ep-size", "8", "--enable-mscclpp"],
            "speculative_algorithm": "EAGLE3",
            "speculative_num_steps": 3,
            "sglang_python": "/envs/sg/bin/python",
        }
    )
    assert server_argv(values) == [
        "/envs/sg/bin/python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/m dir/K2.5",
        "--tp-size",
        "8",
        "--host",
        "127.0.0.1",
        "--port",
        "30000",
        "--ep-size",
        "8",
        "--enable-mscclpp",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-num-steps",
        "3",
    ]


def test_parse_bench_stdout_with_padded_labels():
    text = "{:<40} {:<10.2f}\n{:<40} {:<10.2f}\n{:<40} {:<10.2f}\n{:<40} {:<10}\n".format(
        "Output token throughput (tok/s):",
        81.93,
        "Median TPOT (ms):",
        12.2,
        "Accept length:",
        2.41,
        "Backend:",
        "sglang",
    )
    assert parse_bench_stdout(text) == {"output_throughput_tok_s": 81.93, "median_tpot_ms": 12.2, "accept_length": 2.41}
    assert parse_bench_stdout("Output token throughput (tok/s): n/a\n") == {}


def test_parse_result_json_takes_the_last_line():
    text = '{"output_throughput": 40.0}\n{"output_throughput": 81.93, "median_tpot_ms": 12.2, "acc_length": -1}\n'
    assert parse_result_json(text) == {"output_throughput_tok_s": 81.93, "median_tpot_ms": 12.2}
    assert parse_result_json("not json\n") == {}
    assert parse_result_json('{"acc_length": 2.5}') == {"accept_length": 2.5}


def test_parse_decode_line():
    line = (
        "[2026-01-14 10:05:41 TP0] Decode batch, #running-req: 1, #token: 812, token usage: 0.01, "
        "accept len: 2.41, accept rate: 0.60, cuda graph: True, gen throughput (token/s): 81.93, #queue-req: 0"
    )
    assert parse_decode_line(line) == (2.41, 81.93)
    assert parse_decode_line("Prefill batch, #new-seq: 1, #new-token: 1024") is None


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"],
            {"draft_tokens": 3, "speculative_topk": 1},
        ),
        # a chain's k is the verify window less one, whatever --speculative-num-steps says
        (
            ["--speculative-eagle-topk=1", "--speculative-num-draft-tokens=6", "--speculative-num-steps", "5"],
            {"draft_tokens": 5, "speculative_topk": 1},
        ),
        # a tree (top-k 4): k is the draft depth
        (
            ["--speculative-num-steps", "4", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "16"],
            {"draft_tokens": 4, "speculative_topk": 4},
        ),
        # the last value wins, as argparse reads it (flags given twice: server_args, then the typed ones)
        (["--speculative-num-steps", "2", "--speculative-num-steps", "7"], {"draft_tokens": 7}),
        ([], {}),  # left to sglang: not tagged
    ],
)
def test_speculative_tags_from_the_launch_flags(argv, expected):
    assert speculative_tags(argv) == expected


def test_auto_chosen_draft_length_is_said_and_not_tagged(tmp_path):
    port = free_port()
    done = run(port, "ready", tmp_path, speculative={"algorithm": "EAGLE3", "draft_model_path": MODEL})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "accept lengths are not tagged with draft_tokens" in done.stdout
    assert all("draft_tokens" not in m["tags"] for m in metrics(done.stdout))
