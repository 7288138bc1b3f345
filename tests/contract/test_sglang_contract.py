"""The sglang_server recipe against the real SGLang code (the pinned release, see docs/recipes.md).

These fail when the recipe's argv, its parsing or its readiness rules drift from what sglang does.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from app.protocol.sglang_output import READY_LINE, accept_length_from_server_info, parse_decode_line
from runners.preflight import REGISTRY, Context
from runners.recipes.sglang_server import flatten, server_argv, validate
from tests.support.paths import ROOT
from tests.support.sglang import SGLANG_VERSION

STANDIN = ROOT / "tests" / "standins" / "sglang_standin.py"

# Parses each argv with sglang's own launch parser (what `sglang.launch_server` builds) and prints
# the fields the recipe means to set, so a flag that parses into the wrong field also fails.
PARSE = r"""
import argparse, json, sys
import sglang
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser(prog="launch_server.py")
ServerArgs.add_cli_args(parser)
out = []
for argv in json.loads(sys.stdin.read()):
    try:
        ns = parser.parse_args(argv)
    except SystemExit as exc:
        out.append({"error": exc.code})
        continue
    out.append({k: getattr(ns, k, None) for k in ("model_path", "tp_size", "host", "port", "speculative_algorithm",
                "speculative_draft_model_path", "enable_torch_symm_mem", "disable_custom_all_reduce",
                "enable_mscclpp", "enable_flashinfer_allreduce_fusion", "ep_size")})
print(json.dumps({"version": sglang.__version__, "parsed": out}))
"""


def demo_sglang_approaches() -> list[tuple[str, dict]]:
    found = []
    for path in sorted((ROOT / "app" / "demo").glob("*.yaml")):
        for approach in yaml.safe_load(path.read_text())["approaches"]:
            recipe = approach.get("recipe") or {}
            if recipe.get("kind") == "sglang_server":
                found.append((f"{path.stem}/{approach['key']}", recipe["params"]))
    return found


def parse_with_sglang(env: dict, argvs: list[list[str]]) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PARSE],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1]) | {"stderr": done.stderr}


def test_the_checked_release_is_installed(sglang_env):
    assert parse_with_sglang(sglang_env, [])["version"] == SGLANG_VERSION


def test_every_demo_approachs_argv_parses_with_sglangs_server_args(sglang_env):
    approaches = demo_sglang_approaches()
    assert len(approaches) >= 5
    values = [validate(flatten(params)) for _, params in approaches]
    result = parse_with_sglang(sglang_env, [server_argv(v)[3:] for v in values])
    for (name, _), v, parsed in zip(approaches, values, result["parsed"]):
        assert "error" not in parsed, (
            f"{name}: sglang {result['version']} rejects {server_argv(v)[3:]}:\n{result['stderr']}"
        )
        assert parsed["model_path"] == v["model_path"] and parsed["tp_size"] == v["tp_size"], name
        assert parsed["port"] == v["port"] and parsed["host"] == v["host"], name
        assert parsed["speculative_algorithm"] == v["speculative_algorithm"], name
        assert parsed["speculative_draft_model_path"] == v["speculative_draft_model_path"], name
        args = v["server_args"]
        for i, flag in enumerate(args):
            if not flag.startswith("--"):
                continue
            field = flag.lstrip("-").replace("-", "_")
            value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None
            want = True if value is None else value
            assert field in parsed, f"{name}: add {field} to PARSE's fields"
            assert (parsed[field] if value is None else str(parsed[field])) == want, f"{name}: {flag} -> {field}"


def test_the_parser_check_fails_on_drift(sglang_env):
    """A flag sglang does not have (or spells differently) is rejected, with the message preflight reads."""
    argv = server_argv(validate({"model_path": "/m", "tp_size": 8, "server_args": ["--enable-torch-symm-memory"]}))
    result = parse_with_sglang(sglang_env, [argv[3:]])
    assert result["parsed"] == [{"error": 2}]
    assert "launch_server.py: error: unrecognized arguments: --enable-torch-symm-memory" in result["stderr"]


def test_preflight_flag_check_runs_the_real_parser(sglang_env):
    """The preflight check itself (its probe under an interpreter with the real sglang)."""
    ctx = Context(
        validate(
            {
                "model_path": "/m",
                "tp_size": 8,
                "sglang_python": sys.executable,
                "server_args": ["--enable-torch-symm-mem"],
                "speculative_algorithm": "EAGLE3",
                "speculative_draft_model_path": "/d",
            }
        ),
        sglang_env,
        SGLANG_VERSION,
        timeout_s=300,
    )
    assert REGISTRY["sglang_flags"].run(ctx).ok
    ctx.values["server_args"] = ["--enable-foo"]
    failed = REGISTRY["sglang_flags"].run(ctx)
    assert not failed.ok and failed.cause == "flag not supported by this sglang: --enable-foo"
    assert failed.bound_to == ["sglang"] and f"sglang {SGLANG_VERSION} does not know" in failed.summary


# --- what the server writes, read from sglang's source ------------------------------------------------


def source(root: Path, rel: str) -> str:
    return (root / rel).read_text(encoding="utf-8")


def test_the_ready_line_is_the_one_sglang_logs(sglang_source):
    http = source(sglang_source, "srt/entrypoints/http_server.py")
    assert f'logger.info("{READY_LINE}")' in http
    standin = STANDIN.read_text()
    assert f'READY_LINE = "{READY_LINE}"' in standin


def test_health_is_503_while_starting_and_200_when_up(sglang_source):
    http = source(sglang_source, "srt/entrypoints/http_server.py")
    health = http[http.index('@app.get("/health")') :]
    health = health[: health.index("\n@app.", health.index("\nasync def "))]
    assert "server_status == ServerStatus.Starting:\n        return Response(status_code=503)" in health
    assert "status_code=200" in health


def test_server_info_routes_and_the_accept_length_field(sglang_source):
    http = source(sglang_source, "srt/entrypoints/http_server.py")
    assert '@app.get("/server_info")' in http and '@app.get("/get_server_info")' in http
    info = http[http.index('@app.get("/server_info")') :]
    assert '"internal_states": internal_states' in info[:3000] and '"version": __version__' in info[:3000]
    state = source(sglang_source, "srt/managers/scheduler_components/internal_state.py")
    assert 'state["avg_spec_accept_length"] = accept_length' in state
    assert accept_length_from_server_info({"internal_states": [{"avg_spec_accept_length": 2.37}]}) == 2.37


def test_the_decode_log_line_parses_as_sglang_formats_it(sglang_source):
    reporter = source(sglang_source, "srt/managers/scheduler_components/metrics_reporter.py")
    accept = 'msg += f"accept len: {spec_accept_length:.2f}, accept rate: {spec_accept_rate:.2f}, "'
    tput = 'f"gen throughput (token/s): {self.last_gen_throughput:.2f}, "'
    assert accept in reporter and tput in reporter and "Decode batch" in reporter
    assert re.search(r'"cuda graph"', reporter) or "_graph_backend_label" in reporter
    # Rendered with sglang's own formats, then read by the recipe.
    spec_accept_length, spec_accept_rate, last_gen_throughput = 2.4137, 0.6034, 81.929
    line = (
        "[2026-11-30 09:00:00 TP0] Decode batch, #running-req: 1, #token: 812, token usage: 0.01, "
        + f"accept len: {spec_accept_length:.2f}, accept rate: {spec_accept_rate:.2f}, "
        + "cuda graph: True, "
        + f"gen throughput (token/s): {last_gen_throughput:.2f}, "
        + "#queue-req: 0"
    )
    assert parse_decode_line(line) == (2.41, 81.93)


# --- the real benchmark clients against the stand-in server ------------------------------------------

MODEL = ROOT / "tests" / "fixtures" / "models" / "tiny"  # config.json + a 256-word tokenizer, no weights


def mixed_python(tmp_path: Path, real: str) -> str:
    """An interpreter for the recipe: the real sglang for `real` (a module), the stand-in for the rest."""
    path = tmp_path / "sglang-python"
    path.write_text(
        f"#!{sys.executable}\n"
        "import os, sys\n"
        f"if sys.argv[1:3] == ['-m', {real!r}] or sys.argv[1:2] == ['-c']:\n"
        f"    os.execv({sys.executable!r}, [{sys.executable!r}, *sys.argv[1:]])\n"
        f"os.execv({sys.executable!r}, [{sys.executable!r}, {str(STANDIN)!r}, *sys.argv[1:]])\n"
    )
    path.chmod(0o755)
    return str(path)


def run_recipe_with_real_bench(tmp_path: Path, sglang_env: dict, bench: dict, real: str):
    from runners.recipes import build_launch
    from tests.support.net import free_port
    from tests.support.recipes import metrics

    spec = build_launch(
        {
            "kind": "sglang_server",
            "timeout_s": 600,
            "params": {
                "model_path": str(MODEL),
                "tp_size": 1,
                "sglang_python": mixed_python(tmp_path, real),
                "port": free_port(),
                "ready_timeout_s": 60,
                "teardown_grace_s": 2,
                "flags": ["--enable-metrics"],
                "speculative": {"algorithm": "EAGLE3", "draft_model_path": str(MODEL)},
                "bench": bench,
            },
        }
    )
    spec.env.update(
        {
            "PYTHONPATH": sglang_env["PYTHONPATH"],
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "SGLANG_STANDIN_READY_DELAY_S": "0.1",
            "SGLANG_STANDIN_VERSION": SGLANG_VERSION,
        }
    )
    done = subprocess.run(
        spec.argv, env={**sglang_env, **spec.env}, capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    return done, {m["name"]: m for m in metrics(done.stdout)}


def test_the_real_bench_serving_runs_and_the_recipe_reads_its_output(tmp_path, sglang_env):
    from app.protocol.sglang_output import SUMMARY_METRICS, parse_bench_stdout

    result_file = tmp_path / "bench.jsonl"
    done, found = run_recipe_with_real_bench(
        tmp_path,
        sglang_env,
        {"tool": "bench_serving", "num_prompts": 4, "input_len": 32, "output_len": 8, "result_file": str(result_file)},
        "sglang.bench_serving",
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "============ Serving Benchmark Result ============" in done.stdout  # sglang's own summary
    for label in SUMMARY_METRICS:  # every label the recipe reads is one sglang prints
        assert f"\n{label + ':':<40} " in done.stdout, label
    record = json.loads(result_file.read_text().splitlines()[-1])
    for key, name in (
        ("output_throughput", "output_throughput_tok_s"),
        ("median_tpot_ms", "median_tpot_ms"),
        ("median_itl_ms", "median_itl_ms"),
        ("median_ttft_ms", "median_ttft_ms"),
        ("accept_length", "accept_length"),
    ):
        assert found[name]["value"] == pytest.approx(record[key]), name
        assert found[name]["tags"]["source"] == "result_file"
    printed = parse_bench_stdout(done.stdout)
    assert printed["output_throughput_tok_s"] == pytest.approx(record["output_throughput"], abs=0.006)
    # bench_serving's accept length is the server's /server_info avg_spec_accept_length (the stand-in's 2.37).
    assert record["accept_length"] == found["server_avg_spec_accept_length"]["value"] == 2.37
    assert found["output_throughput_tok_s"]["tags"]["sglang_version"] == SGLANG_VERSION


ONE_BATCH_PARSE = r"""
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
from sglang.benchmark.one_batch_server import BenchArgs
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
BenchArgs.add_cli_args(parser)
ns = parser.parse_args(json.loads(sys.stdin.read()))
print(json.dumps({k: getattr(ns, k) for k in ("model_path", "base_url", "batch_size", "input_len", "output_len",
                                              "result_filename")}))
"""


def test_bench_one_batch_server_argv_and_result_keys(sglang_env, sglang_source):
    """It cannot run here (its client resolves ServerArgs, which needs an accelerator), so: its own parser
    takes the recipe's argv, and its result writer has the keys the recipe reads."""
    from app.protocol.sglang_output import JSON_METRICS
    from runners.recipes.sglang_server import bench_argv

    values = validate(
        {
            "model_path": "/models/K",
            "bench_tool": "bench_one_batch_server",
            "batch_size": 1,
            "input_len": 1024,
            "output_len": 16,
            "port": 30001,
        }
    )
    argv = bench_argv(values, "/tmp/r.jsonl")
    assert argv[1:3] == ["-m", "sglang.bench_one_batch_server"]
    done = subprocess.run(
        [sys.executable, "-c", ONE_BATCH_PARSE],
        input=json.dumps(argv[3:]),
        capture_output=True,
        text=True,
        env=sglang_env,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "model_path": "/models/K",
        "base_url": "http://127.0.0.1:30001",
        "batch_size": [1],
        "input_len": [1024],
        "output_len": [16],
        "result_filename": "/tmp/r.jsonl",
    }
    writer = source(sglang_source, "benchmark/one_batch_server.py")
    dump = writer[writer.index("def dump_to_jsonl") :]
    dump = dump[: dump.index("\n    def ", 10) if "\n    def " in dump[10:] else len(dump)]
    for key in ("output_throughput", "acc_length"):
        assert key in JSON_METRICS and f'"{key}": round(self.{key}, 2)' in dump, key
    assert "acc_length = -1" in writer  # "no speculation", which the recipe leaves out
