"""The vllm_server recipe against the real engine: vLLM 0.32.0 (CPU build) from .cache/vllm, installed by
scripts/ensure-vllm (`make engine`, run by `make test`), serving a tiny random Llama written locally. No
stand-in server anywhere here. Serial (each run starts one or two ~3 GiB servers on a 2-core machine); a
module-scoped run is shared by the tests that read it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import psutil
import pytest

from app.domain.signatures import classify
from app.protocol.metrics import MetricName as M
from runners.recipes.engine_acceptance import VLLM_LOG_LINE
from runners.recipes.vllm_server import SPECULATIVE_KEYS
from tests.support.paths import ROOT
from tests.support.vllm import COPY, NGRAM_K3, metrics_of, port_pair, recipe_argv, run_recipe, vllm_python

pytestmark = pytest.mark.serial


def _one(found: list[dict], name: str, **tags) -> dict:
    rows = [m for m in found if m["name"] == name and all(m["tags"].get(k) == v for k, v in tags.items())]
    assert len(rows) == 1, (name, tags, [m["tags"] for m in found if m["name"] == name])
    return rows[0]


@pytest.fixture(scope="module")
def ngram_run() -> subprocess.CompletedProcess:
    return run_recipe(f"--speculative-config={json.dumps(NGRAM_K3)}", "--batch=1", "--pairs=2")


def test_the_speculative_keys_are_the_releases_own():
    code = (
        "import dataclasses, json\n"
        "from vllm.config.speculative import SpeculativeConfig\n"
        "print(json.dumps([f.name for f in dataclasses.fields(SpeculativeConfig) if f.init]))\n"
    )
    done = subprocess.run([vllm_python(), "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    fields = set(json.loads(done.stdout.strip().splitlines()[-1]))
    filled_in_by_vllm = {f for f in fields if f.endswith("_config")}  # target/draft model and parallel configs
    assert set(SPECULATIVE_KEYS) == fields - filled_in_by_vllm


def test_ngram_k3_runs_the_whole_path_with_every_figure_tagged(ngram_run):
    out = ngram_run.stdout
    assert ngram_run.returncode == 0, out[-4000:] + ngram_run.stderr[-2000:]
    found = metrics_of(out)
    assert "Starting vLLM server" in out  # the engine's own log, streamed into the trial
    phases = [line for line in out.splitlines() if line.startswith("@@campaign-phase batch 1: window")]
    assert [p.rsplit("(", 1)[1] for p in phases] == ["spec off)", "spec on)", "spec off)", "spec on)"]
    conditions = {"engine": "vllm", "engine_version": "0.32.0", "batch": 1, "dtype": "bfloat16", "mode": "eager"}
    for spec in ("off", "on"):
        tok_s = _one(found, M.ENGINE_OUTPUT_TOK_S, spec=spec, **conditions)
        assert len(tok_s["samples"]) == 2 and tok_s["value"] > 0  # one sample per window
        for stat in ("median", "p90"):
            assert _one(found, M.ENGINE_TPOT_MS, spec=spec, stat=stat)["value"] > 0
            assert _one(found, M.ENGINE_REQUEST_LATENCY_MS, spec=spec, stat=stat)["value"] > 0
        by_counter = _one(found, M.ENGINE_STEP_MS, spec=spec, method="iteration-counter")
        by_tpot = _one(found, M.ENGINE_STEP_MS, spec=spec, method="tpot-x-tokens-per-step")
        assert by_counter["value"] > 0 and by_tpot["value"] > 0
        assert by_tpot["tags"]["vs_iteration_counter"] == pytest.approx(
            by_tpot["value"] / by_counter["value"], rel=1e-3
        )
        for tag, value in (
            ("prompt_set", "repeats:seed=0"),
            ("input_len", 64),
            ("output_len", 32),
            ("prefix_caching", False),
            ("temperature", 0),
            ("ignore_eos", True),
            ("device", "cpu"),
            ("model", str(ROOT / ".cache" / "vllm" / "models" / "tiny-llama")),
        ):
            assert tok_s["tags"][tag] == value, tag
    assert _one(found, M.ENGINE_OUTPUT_TOK_S, spec="on")["tags"]["speculative_method"] == "ngram"
    assert _one(found, M.ENGINE_OUTPUT_TOK_S, spec="on")["tags"]["draft_tokens"] == 3
    assert _one(found, M.ENGINE_OUTPUT_TOK_S, spec="off")["tags"]["speculative_method"] == "none"
    speedup = _one(found, M.ENGINE_SPEEDUP, batch=1)
    assert len(speedup["samples"]) == 2 and speedup["tags"]["draft_tokens"] == 3
    on = _one(found, M.ENGINE_OUTPUT_TOK_S, spec="on")["samples"]
    off = _one(found, M.ENGINE_OUTPUT_TOK_S, spec="off")["samples"]
    assert speedup["samples"] == pytest.approx([b / a for a, b in zip(off, on, strict=True)])
    rates = [m for m in found if m["name"] == M.ENGINE_ACCEPT_RATE_POS]
    assert sorted(m["tags"]["position"] for m in rates) == [1, 2, 3]
    assert all(0 < m["value"] <= 1 for m in rates)  # repeated phrases: n-gram lookup finds drafts


def test_acceptance_from_the_counters_is_the_sum_of_the_engines_own_log_lines(ngram_run):
    """The counters are differenced around the speculation-on windows with the server idle before and after
    (the recipe waits out the log interval), so the SpecDecoding lines the engine wrote bracket them."""
    found = metrics_of(ngram_run.stdout)
    accept = [m for m in found if m["name"] == M.ENGINE_ACCEPT_LENGTH and m["tags"]["draft_tokens"] == 3][-1]
    out = ngram_run.stdout.splitlines()
    start = next(i for i, line in enumerate(out) if line.startswith("@@campaign-phase batch 1: window 1/"))
    end = out.index("@@campaign-phase tearing down")
    # the warm-up's lines come before the measured span (the recipe waits out the log interval after it)
    span = [m for m in map(VLLM_LOG_LINE.search, out[start:end]) if m]
    assert span, "no SpecDecoding lines"
    assert sum(int(m.group("accepted")) for m in span) == accept["tags"]["window_accepted_tokens"]
    assert sum(int(m.group("drafted")) for m in span) == accept["tags"]["window_draft_tokens"]
    assert accept["tags"]["per_position_sum_matches"] is True
    assert accept["value"] == pytest.approx(
        1 + accept["tags"]["window_accepted_tokens"] / accept["tags"]["window_drafts"]
    )


def test_a_draft_that_copies_the_target_accepts_every_token():
    config = {"method": "draft_model", "model": str(COPY), "num_speculative_tokens": 3}
    done = run_recipe(f"--speculative-config={json.dumps(config)}", "--baseline=off", "--batch=1", "--pairs=1")
    assert done.returncode == 0, done.stdout[-4000:]
    found = metrics_of(done.stdout)
    accept = [m for m in found if m["name"] == M.ENGINE_ACCEPT_LENGTH and m["tags"]["draft_tokens"] == 3][-1]
    rate = accept["tags"]["window_accepted_tokens"] / accept["tags"]["window_draft_tokens"]
    assert rate >= 0.99
    assert accept["tags"]["speculative_method"] == "draft_model"
    assert not [m for m in found if m["name"] == M.ENGINE_SPEEDUP]  # no baseline server: no pair


def test_without_speculation_the_trial_says_so_and_emits_no_acceptance():
    done = run_recipe("--batch=2", "--pairs=1")
    assert done.returncode == 0, done.stdout[-4000:]
    assert "vllm_server: no speculation: no acceptance figures" in done.stdout
    found = metrics_of(done.stdout)
    assert not [m for m in found if m["name"].startswith("engine_accept") or m["name"] == M.ENGINE_SPEEDUP]
    assert _one(found, M.ENGINE_OUTPUT_TOK_S, spec="off", batch=2)["tags"]["speculative_method"] == "none"
    assert _one(found, M.ENGINE_STEP_MS, spec="off", method="iteration-counter")["value"] > 0


def test_cancel_during_the_load_leaves_no_engine_process():
    argv = recipe_argv(port_pair(), "--output-len=400", "--rounds=50", "--batch=1", "--pairs=1")
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    lines: list[str] = []
    loading = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("@@campaign-phase batch 1: window"):
                loading.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert loading.wait(400), "".join(lines[-40:])
        engine = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        servers = [p for p in engine if "vllm.entrypoints" in " ".join(p.cmdline())]
        assert servers, "no vLLM server under the recipe"
        below = {(p.pid, p.create_time()) for s in servers for p in [s, *s.children(recursive=True)]}
        assert len(below) >= 2  # the API server and its engine core
        time.sleep(1.0)  # inside the window's requests
        os.kill(proc.pid, signal.SIGTERM)  # what the runner's cancel sends first
        assert proc.wait(120) == 143
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        reader.join(10)

    def alive(pid: int, created: float) -> bool:
        try:
            p = psutil.Process(pid)
            return abs(p.create_time() - created) < 0.01 and p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    assert [pid for pid, created in below if alive(pid, created)] == []
    assert "vllm_server: terminated; tearing the servers down" in "".join(lines)


def test_a_wrong_flag_fails_with_the_classified_reason():
    done = run_recipe("--server-arg=--no-such-flag", timeout=300)
    assert done.returncode == 1
    found = classify(done.stdout, exit_code=done.returncode)
    assert found is not None
    assert (found.signature, found.cause) == ("unknown_flag", "flag not supported by this vLLM: --no-such-flag")
