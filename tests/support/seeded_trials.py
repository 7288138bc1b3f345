"""Trials made through the domain for API and page tests: campaigns c (approaches a, b) and d, two runners on
an old and a new stack, trials with logs of metric lines (create_trial, append_chunks, the scheduler's states)."""

from __future__ import annotations

from dataclasses import dataclass

from app.db import session_scope
from app.domain import logs
from app.domain.scheduling import create_trial
from app.models import Approach, Campaign, Runner, TrialState, utcnow
from app.protocol.metrics import format_metric

FP_OLD = {
    "gpu_count": 8,
    "sm": "12.0",
    "torch": "2.10.0+cu128",
    "cuda": "12.8",
    "nccl": "2.27.3",
    "driver": "575.57",
    "gpus": [{"name": "NVIDIA RTX PRO 6000 Blackwell", "sm": "12.0"}],
}


FP_NEW = {**FP_OLD, "torch": "2.11.0+cu130", "cuda": "13.0"}


@dataclass
class Seeded:
    trial_ids: list[int]  # oldest first
    logs: dict[int, str]
    runner_ids: dict[str, int]
    other_trial: int = 0  # a trial of campaign d


def trial_log(n: int, tokens: list[int]) -> str:
    lines = [f"trial {n} starting <b>&amp;</b>\n"]
    for t in tokens:
        lines.append(format_metric("allreduce_latency_us", 10.0 * n + t, "us", tokens=t, mode="graph") + "\n")
    lines.append(f"done {n}\n")
    return "".join(lines)


def seed_trials(engine, count: int = 6, suffix: str = "") -> Seeded:
    """Campaign `c` (approaches a, b) and `d` (approach x); runners node-1 (old stack) and node-2 (new);
    `count` trials in `c` alternating a / b, the first half on node-1, each with a log of metric lines;
    one trial in `d`. States: the last is running, the one before failed, the rest succeeded. `suffix` goes
    after every slug and name, for a second set in the same database."""
    seeded = Seeded([], {}, {})
    with session_scope(engine) as s:
        c, d = Campaign(slug=f"c{suffix}", name="C"), Campaign(slug=f"d{suffix}", name="D")
        s.add_all([c, d])
        s.flush()
        assert c.id is not None and d.id is not None
        a = Approach(campaign_id=c.id, key="a", title="Approach <A>", position=1, recipe={"kind": "command"})
        b = Approach(campaign_id=c.id, key="b", title="Approach B", position=2, recipe={"kind": "command"})
        x = Approach(campaign_id=d.id, key="x", title="X", position=1, recipe={"kind": "command"})
        r1 = Runner(name=f"node-1{suffix}", token_hash=f"h1{suffix}", connected=True, fingerprint=FP_OLD)
        r2 = Runner(name=f"node-2{suffix}", token_hash=f"h2{suffix}", connected=True, fingerprint=FP_NEW)
        s.add_all([a, b, x, r1, r2])
        s.flush()
        seeded.runner_ids = {r1.name: r1.id, r2.name: r2.id}  # type: ignore[dict-item]
        extractor = logs.MetricExtractor()
        for n in range(count):
            runner = r1 if n < count // 2 else r2
            trial = create_trial(s, a if n % 2 == 0 else b, runner, "tester")
            trial_approach = a if n % 2 == 0 else b
            trial_approach.status = "untested"  # the next trial of it starts from untested again
            text = trial_log(n, [1, 8, 64])
            half = len(text) // 2
            assert trial.id is not None and trial.attempt_id is not None
            chunks = [
                logs.Chunk(trial.id, trial.attempt_id, 0, 0, text[:half]),
                logs.Chunk(trial.id, trial.attempt_id, 1, half, text[half:]),
            ]
            logs.append_chunks(s, chunks, runner_id=runner.id, cap_bytes=10**9, metrics=extractor)  # type: ignore[arg-type]
            extractor.finish(s, trial, 1)
            trial.state = (
                TrialState.running if n == count - 1 else TrialState.failed if n == count - 2 else TrialState.succeeded
            )
            trial.started_at = utcnow()
            if n < count - 1:
                trial.finished_at = utcnow()
            s.add(trial)
            s.flush()
            seeded.trial_ids.append(trial.id)
            seeded.logs[trial.id] = text
        other = create_trial(s, x, r2, "tester")
        seeded.logs[other.id] = ""  # type: ignore[index]
        seeded.other_trial = other.id  # type: ignore[assignment]
    return seeded
