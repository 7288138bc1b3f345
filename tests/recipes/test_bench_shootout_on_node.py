"""bench/shootout_on_node.py against a real `campaign serve --demo` with its embedded runner (CPU rows only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

from tests.support.recipes import ROOT


def test_a_trial_past_its_deadline_is_cancelled_and_the_run_goes_on(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "shootout_on_node.py"),
            "--out",
            str(out),
            "--max-trials",
            "2",
            "--trial-deadline-s",
            "0.5",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["fingerprint"]["gpu_count"] == 0
    trials = summary["trials"]
    assert [t["approach"] for t in trials] == ["gloo-cpu", "verify-step-gloo-cpu"]  # GPU rows never offered
    for trial in trials:
        assert trial["deadline_cancelled"] is True and trial["state"] == "cancelled", trial
        assert "verdict" in trial or "verdict_error" in trial
    assert "past its 0.5s deadline; cancelling" in done.stdout
    assert (out / "allreduce-shootout.yaml").read_text().startswith("format: campaign-board/v1")
    assert (out / "allreduce-shootout-metrics.csv").exists()


SWEEP = """\
format: campaign-board/v1
campaign: {slug: cpu-sweep, name: A CPU sweep}
approaches:
- key: decode-and-verify-cpu
  title: Decode and verify step on CPU, world size 1
  status: untested
  recipe:
    kind: verify_step
    params: {backend: gloo, world_size: 1, hidden_size: 64, ffn_size: 128, layers: 2, heads: 2, kv_lora_rank: 8,
      kv_rope_dim: 4, context: 8, batches: [1, 2], draft_tokens: [0, 1], dtype: fp32, warmup: 0, iters: 3, calls: 1}
    timeout_s: 120
  requirements: {gpus: 0, software: [torch]}
"""


def test_a_campaign_file_is_imported_run_and_its_results_exported(tmp_path):
    """The path of `gpu_session.sh sweep`: --import a campaign file, run it through the server and runner,
    then `campaign export --with-results` from the run's database carries every point with its samples."""
    plan = tmp_path / "sweep.yaml"
    plan.write_text(SWEEP)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "shootout_on_node.py"), "--campaign", "cpu-sweep"]
        + ["--import", str(plan), "--out", str(out), "--trial-deadline-s", "120"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "created campaign 'cpu-sweep': 1 approach(es) added" in done.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert [(t["approach"], t["state"]) for t in summary["trials"]] == [("decode-and-verify-cpu", "succeeded")]
    (db,) = (out / "data").glob("*.db")
    exported = subprocess.run(
        [sys.executable, "-m", "app.cli", "export", "cpu-sweep", "--with-results"],
        cwd=ROOT,
        env={**os.environ, "CAMPAIGN_DATABASE_URL": f"sqlite:///{db}", "CAMPAIGN_DATA_DIR": str(out / "data")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert exported.returncode == 0, exported.stderr
    (trial,) = yaml.safe_load(exported.stdout)["results"]
    points = {
        (m["tags"]["batch"], m["tags"]["draft_tokens"]) for m in trial["metrics"] if m["name"] == "verify_compute_ms"
    }
    assert points == {(1, 0), (1, 1), (2, 0), (2, 1)}
    assert all(len(m["samples"]) == 3 for m in trial["metrics"])
    assert trial["fingerprint"]["gpu_count"] == 0
