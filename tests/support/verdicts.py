"""Verdict test helpers (tests/domain/test_verdicts.py, tests/web/test_verdict_routes.py): campaigns,
runners with a stack fingerprint, and trials ended through scheduling the way a runner reports them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlmodel import Session, select

from app.domain import campaigns, scheduling, statistics, trials, verdicts
from app.domain import runners as runner_domain
from app.models import Approach, Campaign, Metric, Runner, Trial
from app.protocol.messages import Finished
from tests.support.paths import ROOT
from tests.support.trials import FINGERPRINT, command_recipe, seed_campaign

LOGS = ROOT / "tests" / "fixtures" / "logs"
# The stack a verdict was reached on, and stacks a runner may report later.
OLD_STACK = {**FINGERPRINT, "hostname": "node-a", "torch": "2.10.0+cu128"}
NEW_TORCH = {**OLD_STACK, "hostname": "node-b", "torch": "2.11.0"}
NEW_NCCL = {**OLD_STACK, "hostname": "node-c", "nccl": "2.28.9"}
NO_TORCH = {**OLD_STACK, "hostname": "node-d", "torch": None}
TWO_GPUS_NEW_TORCH = {**NEW_TORCH, "hostname": "node-e", "gpu_count": 2, "gpus": FINGERPRINT["gpus"][:2]}
RECIPE = command_recipe("true")


def seed(engine, *approaches: dict[str, Any], slug: str = "c") -> None:
    """Approaches by key; each gets a recipe and 'needs 8 GPUs' unless it says otherwise."""
    seed_campaign(
        engine,
        slug,
        [{"title": a["key"].upper(), "recipe": RECIPE, "requirements": {"gpus": 8}, **a} for a in approaches],
    )


def campaign(s: Session, slug: str = "c") -> Campaign:
    return campaigns.get_campaign(s, slug)


def approach(s: Session, key: str, slug: str = "c") -> Approach:
    return campaigns.get_approach(s, campaign(s, slug), key)


def runner(s: Session, name: str, fingerprint: dict[str, Any], connected: bool = True) -> Runner:
    r, _ = runner_domain.create_runner(s, name)
    runner_domain.mark_connected(s, r, fingerprint, [])
    if not connected:
        assert r.id is not None
        runner_domain.mark_disconnected(s, r.id)
    return r


def end_trial(
    s: Session,
    a: Approach,
    r: Runner,
    *,
    log: str = "",
    exit_code: int | None = 0,
    outcome: str = "exited",
    metrics: Sequence[dict] = (),
) -> Trial:
    """A trial of the approach on the runner, run to its end the way a runner reports it."""
    return run_to_end(
        s, scheduling.create_trial(s, a, r, "tester"), log=log, exit_code=exit_code, outcome=outcome, metrics=metrics
    )


def run_to_end(
    s: Session,
    trial: Trial,
    *,
    log: str = "",
    exit_code: int | None = 0,
    outcome: str = "exited",
    metrics: Sequence[dict] = (),
) -> Trial:
    a = s.get(Approach, trial.approach_id)
    assert a is not None and a.id is not None and trial.id is not None
    trials.mark_started(s, trial)
    for i, m in enumerate(metrics):
        s.add(
            Metric(
                trial_id=trial.id,
                approach_id=a.id,
                campaign_id=a.campaign_id,
                seq=0,
                index=i,
                name=m["name"],
                value=m["value"],
                unit=m.get("unit", ""),
                tags=m.get("tags", {}),
                samples=m.get("samples"),
                # As the ingest writes them (logs._save_metrics); m["summary"] False: a row written without them.
                **statistics.summary_columns(m.get("samples") if m.get("summary", True) else None),
            )
        )
    s.flush()
    assert trials.finish(
        s,
        trial,
        Finished(trial_id=trial.id, attempt_id=trial.attempt_id, exit_code=exit_code, outcome=outcome),
        log_text=log,
    )
    s.refresh(a)
    return trial


def fixture_log(name: str) -> str:
    return (LOGS / name).read_text()


def dead_end_on_old_stack(s: Session, key: str, components: Sequence[str] = ("torch", "sm")) -> Approach:
    """The approach's trial failed on OLD_STACK (runner node-a) and a person confirmed dead end."""
    a = approach(s, key)
    node = s.exec(select(Runner).where(Runner.name == "node-a")).first() or runner(s, "node-a", OLD_STACK)
    trial = end_trial(s, a, node, log=fixture_log("symm_mem_keyerror_sm120.log"), exit_code=1)
    verdicts.confirm(s, a, trial, "dead_end", "KeyError: 12 in symmetric memory", list(components), "alice")
    return a


def doing(s: Session, key: str, slug: str = "c") -> campaigns.Doing | None:
    """What the approach's trial is doing (queued, running), or None: shown beside its decided status."""
    a = approach(s, key, slug)
    assert a.id is not None
    return campaigns.activities(s, [a]).get(a.id)


def read_every_proposal(s: Session, slug: str = "c") -> None:
    """A person has read every waiting proposal of the campaign (kept untested): Run this, Repeat and
    Settle refuse an approach whose proposal still waits (scheduling.can_run)."""
    for a in campaigns.approaches(s, campaign(s, slug)):
        if a.pending_trial_id is not None:
            trial = s.get(Trial, a.pending_trial_id)
            assert trial is not None
            verdicts.confirm(s, a, trial, "untested", "read: measure more", [], "tester")
