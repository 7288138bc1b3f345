"""bench/harness_overhead.py on gloo: the recipe's method against both bare-loop methods (no timing asserts)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.recipes import ROOT


def test_recipe_is_compared_with_both_other_methods(tmp_path):
    out = tmp_path / "overhead.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "harness_overhead.py"),
            "--variants=gloo:eager",
            "--hidden=64",
            "--tokens=1,2",
            "--rounds=1",
            "--warmup-rounds=0",
            "--iters=3",
            "--calls=4",
            "--dtype=fp32",
            f"--out={out}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())["rows"]
    assert {(r["tokens"], r["recipe_method"], r["bare_method"]) for r in rows} == {
        (t, "nccl-tests", m) for t in (1, 2) for m in ("per-call-events", "wall-clock")
    }
    for row in rows:
        assert row["ratio_median"] == row["recipe_median_us"] / row["bare_median_us"]
    assert "recipe / bare wall-clock: geometric mean" in done.stdout
    assert "recipe / bare per-call-events: geometric mean" in done.stdout
