"""A small campaign to replay (tests/domain/test_replay.py, tests/trials/test_replay_runners.py): verdicts
reached on node-a (OLD_STACK), bound to torch or to components a newer torch leaves alone."""

from __future__ import annotations

import numpy as np

from app.db import session_scope
from app.domain import verdicts
from tests.support.verdicts import OLD_STACK, approach, campaign, dead_end_on_old_stack, end_trial, runner, seed

BYTES = 4 * 7168 * 2  # the verify size of the campaign below: 56 KiB
TAGS = {"bytes": BYTES, "mode": "graph", "device": "cuda"}
ALLREDUCE = {"kind": "allreduce", "params": {}}


def latency(center: float, seed: int) -> list[dict]:
    """An allreduce latency metric at the verify size: 12 samples around `center` at 1% noise."""
    samples = [float(x) for x in np.random.default_rng(seed).normal(center, center * 0.01, 12)]
    return [
        {"name": "allreduce_latency_us", "value": float(np.median(samples)), "unit": "us", "tags": TAGS,
         "samples": samples}
    ]  # fmt: skip


def build(engine) -> None:
    """Priority: slow (dead end, torch), fast (dead end, torch; a reported 20 us), measured (promising at
    ~50 us, torch), nccl_only (dead end bound to NCCL), physics (dead end bound to nothing), fresh (untested).
    Every verdict was reached on node-a (OLD_STACK: torch 2.10.0+cu128)."""
    seed(
        engine,
        {"key": "slow", "effort": "high", "recipe": ALLREDUCE, "requirements": {"gpus": 2}},
        {"key": "fast", "effort": "low", "recipe": ALLREDUCE, "requirements": {"gpus": 2}},
        {"key": "measured", "effort": "medium", "recipe": ALLREDUCE, "requirements": {"gpus": 2}},
        {"key": "nccl_only"},
        {"key": "physics"},
        {"key": "fresh"},
    )
    with session_scope(engine) as s:
        c = campaign(s)
        c.baseline_tok_s, c.accept_length, c.draft_steps, c.draft_step_ms, c.verify_compute_ms = 82.0, 2.4, 3, 0.5, 9.0
        c.reported = [
            {"label": "NCCL (the baseline)", "t_ar_us": 200.0, "baseline": True, "source": "seed"},
            {"label": "fast's library", "approach": "fast", "t_ar_us": 20.0, "source": "its docs"},
        ]
        s.add(c)
        node_a = runner(s, "node-a", OLD_STACK)
        dead_end_on_old_stack(s, "slow", ["torch", "sm"])
        dead_end_on_old_stack(s, "fast", ["torch"])
        dead_end_on_old_stack(s, "nccl_only", ["nccl"])
        dead_end_on_old_stack(s, "physics", [])
        m = approach(s, "measured")
        trial = end_trial(s, m, node_a, metrics=latency(50.0, seed=1))
        verdicts.confirm(s, m, trial, "promising", "50 us at 56 KiB", ["torch"], "alice")
