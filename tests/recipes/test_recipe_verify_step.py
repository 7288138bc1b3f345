"""The synthetic verify step, run for real on gloo with 2 processes at a small geometry."""

from __future__ import annotations

import math

from runners.recipes import build_launch
from tests.support.recipes import metrics, run_module, run_spec


def test_gloo_verify_step_reports_comm_share():
    spec = build_launch(
        {
            "kind": "verify_step",
            "params": {
                "backend": "gloo",
                "world_size": 2,
                "hidden_size": 256,
                "ffn_size": 512,
                "layers": 3,
                "tokens": 4,
                "warmup": 1,
                "iters": 4,
            },
        }
    )
    done = run_spec(spec)
    assert done.returncode == 0, done.stderr
    assert "correctness ok vs unsharded reference" in done.stdout
    found = {m["name"]: m for m in metrics(done.stdout)}
    for name in (
        "verify_time_ms",
        "verify_compute_ms",
        "verify_comm_ms",
        "verify_comm_isolated_ms",
        "verify_comm_share",
        "allreduce_in_situ_us",
    ):
        assert name in found, name
        assert found[name]["tags"]["allreduces"] == 6 and found[name]["tags"]["world_size"] == 2
    verify, compute, comm = (found[n]["value"] for n in ("verify_time_ms", "verify_compute_ms", "verify_comm_ms"))
    assert verify > 0 and compute > 0 and found["verify_comm_isolated_ms"]["value"] > 0
    assert math.isclose(comm, max(verify - compute, 0.0), rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(found["verify_comm_share"]["value"], comm / verify, rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(found["allreduce_in_situ_us"]["value"], comm * 1000 / 6, rel_tol=1e-9, abs_tol=1e-12)
    assert found["verify_time_ms"]["tags"]["bytes"] == 4 * 256 * 2
    # The step's raw samples travel with it (the comparisons read them); derived figures have none.
    iters = found["verify_time_ms"]["tags"]["iters"]
    assert len(found["verify_time_ms"]["samples"]) == iters == len(found["verify_compute_ms"]["samples"])
    assert found["verify_comm_ms"]["samples"] is None
    assert "per allreduce x 6" in done.stdout


def test_indivisible_geometry_is_refused_before_launch():
    done = run_module("runners.recipes.verify_step", "--world-size", "3", "--hidden-size", "256", timeout=60)
    assert done.returncode == 2 and "not divisible by world size 3" in done.stderr
