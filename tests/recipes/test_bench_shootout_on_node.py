"""bench/shootout_on_node.py against a real `campaign serve --demo` with its embedded runner (CPU rows only)."""

from __future__ import annotations

import json
import subprocess
import sys

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
