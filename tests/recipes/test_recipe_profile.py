"""`profile: true`: after the timed runs, a short profiled run (never a timing sample) writes a torch.profiler
Chrome trace into $CAMPAIGN_ARTIFACTS_DIR; the board's trace reader finds in it the recipe's own allreduce
count per step (N_ar) and an in-situ allreduce time near the recipe's figure. Real torch, gloo on CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.domain.traces import read_trace
from app.protocol.metrics import MetricName as M
from app.protocol.recipes import RecipeError
from runners.recipes._params import Param, validate
from tests.support.recipes import by_name, metrics, run_module

SMALL = [
    "--backend=gloo", "--world-size=2", "--layers=3", "--hidden-size=64", "--ffn-size=128", "--heads=4",
    "--kv-lora-rank=16", "--kv-rope-dim=8", "--context=32", "--iters=3", "--warmup=1",
]  # fmt: skip


def test_a_profiled_gloo_verify_step_gives_the_recipes_own_allreduce_count(tmp_path):
    out = run_module(
        "runners.recipes.verify_step",
        *SMALL,
        "--profile=true",
        env={"CAMPAIGN_ARTIFACTS_DIR": str(tmp_path)},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    found = metrics(out.stdout)
    (in_situ,) = by_name(found, M.ALLREDUCE_IN_SITU_US)
    assert (
        in_situ["tags"]["allreduces"] == 6 and in_situ["tags"]["sample_count"] == 3
    )  # the profiled steps are not samples
    assert len(by_name(found, M.VERIFY_TIME_MS)[0]["samples"]) == 3
    summary = read_trace(tmp_path / "verify_step.trace.json")
    assert summary.step_name == "verify_step" and summary.steps == 3
    assert summary.allreduces_per_step == in_situ["tags"]["allreduces"]
    # The trace's t_ar is its own method (profiled spans, a rank waiting for the other included): on a loaded CPU
    # it is not the recipe's figure, nor within a fixed factor of it (CI saw 5.7x). What must hold whatever the
    # load: the collectives are spans inside the counted steps, so a step's allreduce time fits in the step.
    t_ar, n_ar = summary.allreduce_us, summary.allreduces_per_step
    assert t_ar is not None and n_ar is not None and t_ar > 0 and in_situ["value"] > 0
    ar_per_step_us = t_ar * n_ar
    assert ar_per_step_us <= summary.step_us / summary.steps
    assert "profiling verify_step (3 steps, not timed)" in out.stdout


def test_a_profiled_draft_step_on_cpu_writes_its_trace(tmp_path):
    out = run_module(
        "runners.recipes.draft_step",
        "--device=cpu", "--hidden-size=64", "--vocab-size=128", "--ffn-size=128", "--heads=4", "--context-len=16",
        "--iters=2", "--warmup=1", "--calls=1", "--profile=yes",
        env={"CAMPAIGN_ARTIFACTS_DIR": str(tmp_path)},
        timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    summary = read_trace(Path(tmp_path / "draft_step.trace.json"))
    assert summary.step_name == "draft_step" and summary.steps == 3 and summary.allreduces_per_step is None
    assert any(r.name == "aten::mm" or r.name == "aten::addmm" for r in summary.rows)


@pytest.mark.parametrize(("raw", "value"), [(True, True), ("false", False), ("YES", True), ("0", False)])
def test_a_bool_parameter_takes_true_and_false_in_their_usual_spellings(raw, value):
    assert validate({"profile": raw}, [Param("profile", "bool", False)]) == {"profile": value}


def test_a_bool_parameter_refuses_anything_else():
    with pytest.raises(RecipeError, match="params.profile .*must be true or false, got 'maybe'"):
        validate({"profile": "maybe"}, [Param("profile", "bool", False)])


def test_a_profiled_gloo_allreduce_gives_one_allreduce_per_step(tmp_path):
    out = run_module(
        "runners.recipes.allreduce",
        "--backend=gloo", "--world-size=2", "--hidden-size=64", "--tokens=4,8", "--iters=3", "--warmup=1",
        "--calls=2", "--per-call-iters=0", "--profile=true",
        env={"CAMPAIGN_ARTIFACTS_DIR": str(tmp_path)},
        timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    latency = by_name(metrics(out.stdout), M.ALLREDUCE_LATENCY_US)
    assert [line["tags"]["tokens"] for line in latency] == [4, 8]
    assert all(len(line["samples"]) == 3 for line in latency)  # the profiled steps are not samples
    summary = read_trace(tmp_path / "allreduce.trace.json")  # the default step names include the recipe's label
    # A step is one eager call: the recipe's own count, the trace's allreduces per step.
    assert summary.step_name == "allreduce" and summary.steps == 3
    assert summary.allreduces_per_step == 1
    assert "profiling allreduce (3 steps, not timed)" in out.stdout
