# mypy: disable-error-code="union-attr, arg-type"
# (each test asserts the optional parts it reads: `result.started`, a regex that must match)
""" "Run this approach" (scheduling.run_approach): the chosen approach, whatever its priority or status,
starts on a connected idle runner that can run it; otherwise a clear reason and nothing changes.
On SQLite and PostgreSQL."""

from __future__ import annotations

from sqlmodel import select

from app.db import session_scope
from app.domain import scheduling
from app.models import ApproachStatus, StatusChange, Trial
from tests.support.verdicts import (
    OLD_STACK,
    TWO_GPUS_NEW_TORCH,
    approach,
    campaign,
    dead_end_on_old_stack,
    doing,
    end_trial,
    runner,
    seed,
)


def run(s, key: str, online: set[int] | None = None) -> scheduling.RunNext:
    return scheduling.run_approach(s, campaign(s), approach(s, key), "alice", online=online)


def test_runs_the_chosen_approach_not_the_next_one(engine):
    seed(engine, {"key": "first"}, {"key": "second"})
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        result = run(s, "second")
        assert result.started and result.approach.key == "second" and result.runner.id == node.id
        assert result.dispatch.trial_id == result.trial.id and result.dispatch.attempt_id == result.trial.attempt_id
        assert result.trial.requested_by == "alice" and result.trial.state == "dispatched"
        assert approach(s, "second").status == ApproachStatus.untested  # what a person decided: nothing yet
        assert doing(s, "second").activity == "queued"
        assert approach(s, "first").status == ApproachStatus.untested


def test_a_decided_approach_can_be_run_again(engine):
    seed(engine, {"key": "a"})
    with session_scope(engine) as s:
        dead_end_on_old_stack(s, "a")
    with session_scope(engine) as s:
        assert approach(s, "a").status == ApproachStatus.dead_end
        # run next would not pick it (same stack: no re-test flag); a person may.
        assert not scheduling.run_next(s, campaign(s), "alice").started
        result = run(s, "a")
        assert result.started and approach(s, "a").status == ApproachStatus.dead_end
        change = s.exec(select(StatusChange).order_by(StatusChange.id.desc())).first()
        assert (change.kind, change.from_status, change.to_status, change.trial_id) == (
            "trial",
            "dead_end",
            "dead_end",
            result.trial.id,
        )


def refused(engine, key: str, online: set[int] | None = None) -> str:
    with session_scope(engine) as s:
        trials_before = len(s.exec(select(Trial)).all())
        status_before = approach(s, key).status
        result = run(s, key, online)
        assert not result.started and result.trial is None and result.dispatch is None
        assert len(s.exec(select(Trial)).all()) == trials_before and approach(s, key).status == status_before
        return result.reason


def test_refuses_with_the_reason(engine):
    seed(
        engine,
        {"key": "a", "title": "Eight GPUs"},
        {"key": "norecipe", "title": "No recipe", "recipe": None},
        {"key": "b", "title": "Other"},
    )
    assert refused(engine, "a") == "no runner is connected"
    assert refused(engine, "norecipe") == "No recipe has no recipe: add one under Details › Edit"
    with session_scope(engine) as s:
        small = runner(s, "small", TWO_GPUS_NEW_TORCH).id
    assert refused(engine, "a") == "Eight GPUs needs 8 GPUs: no connected runner has them"
    with session_scope(engine) as s:
        big = runner(s, "big", OLD_STACK).id
    assert refused(engine, "a", online={small}) == "Eight GPUs needs 8 GPUs: no connected runner has them"
    with session_scope(engine) as s:
        trial_id = run(s, "b").trial.id  # takes "big", the one runner that can run "a"
    assert refused(engine, "b") == f"Other is already being tried: trial #{trial_id} is dispatched"
    with session_scope(engine) as s:  # "big" is busy: "a" waits in the queue (tests/domain/test_queue.py)
        result = run(s, "a")
        assert result.queued and not result.started and result.trial.state == "queued"
        assert result.reason == "Eight GPUs waits in the queue for a free runner (big is busy)"
        queued_id = result.trial.id
    assert refused(engine, "a") == f"Eight GPUs is already being tried: trial #{queued_id} is queued"
    assert big != small


def test_refuses_while_a_verdict_is_due(engine):
    seed(engine, {"key": "a", "title": "Tested"})
    with session_scope(engine) as s:
        trial = end_trial(s, approach(s, "a"), runner(s, "node-a", OLD_STACK), exit_code=1)
        trial_id = trial.id
    assert refused(engine, "a") == f"Tested waits for your verdict on trial #{trial_id}: confirm it first"
