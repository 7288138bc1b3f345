# mypy: disable-error-code="union-attr, arg-type"
"""Issue 43, items 1 and 7: a trial proposes, only a person decides a status.

An approach a person decided (adopted, promising, dead end, deferred) run again through *Run this
approach*, *Repeat* or *Run next* shows its trial's activity (queued, running) beside its status; when the
trial ends the status is what the person decided, the proposal waits for a person, and the history
records the trial's end as an event, not as a status change. Run this and Repeat apply one rule
(`scheduling.can_run`): a proposal waiting for a person is read first. On SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlmodel import select

from app.db import session_scope
from app.domain import campaigns, queue, repeats, scheduling, trials, verdicts
from app.domain.errors import Invalid
from app.models import Activity, HistoryKind, Runner, StatusChange, Trial, TrialState
from tests.support.verdicts import (
    NEW_TORCH,
    OLD_STACK,
    approach,
    campaign,
    doing,
    end_trial,
    run_to_end,
    runner,
    seed,
)

DECIDED = ("adopted", "promising", "dead_end", "deferred")


def decided(engine, key: str, status: str, components: tuple[str, ...] = ()) -> None:
    """A trial of the approach on node-a, then a person's verdict on it."""
    with session_scope(engine) as s:
        a = approach(s, key)
        node = s.exec(select(Runner).where(Runner.name == "node-a")).first() or runner(s, "node-a", OLD_STACK)
        trial = end_trial(s, a, node)
        verdicts.confirm(s, a, trial, status, f"{status} by a person", list(components), "alice")


def after_a_trial(engine, key: str, start) -> tuple[int, str]:
    """Start a trial of the approach with `start(session)`; check what shows while it runs; end it."""
    with session_scope(engine) as s:
        before = approach(s, key).status
        trial = start(s)
        assert trial is not None
        a = approach(s, key)
        assert a.status == before  # queued: beside the status, not instead of it
        assert doing(s, key) == campaigns.Doing(Activity.queued, trial.id)
        trial_id = trial.id
    with session_scope(engine) as s:
        trial = s.get(Trial, trial_id)
        if trial.runner_id is None:  # waited in the queue: the idle runner takes it, as app/services does
            node = s.exec(select(Runner).where(Runner.name == "node-a")).one()
            assert queue.start_queued(s, node.id).trial.id == trial_id
        trials.mark_started(s, trial)
        a = approach(s, key)
        assert a.status == before and doing(s, key).activity == "running"
        run_to_end(s, trial)
    return trial_id, before


def check_kept(engine, key: str, trial_id: int, before: str) -> None:
    with session_scope(engine, write=False) as s:
        a = approach(s, key)
        assert a.status == before, f"a trial's end moved {key} from {before} to {a.status}"
        assert a.reason == f"{before} by a person"
        assert a.pending_trial_id == trial_id  # the proposal waits for a person
        assert campaigns.activities(s, [a]) == {}
        rows = [r for r in campaigns.history(s, a) if r.trial_id == trial_id]
        assert [r.kind for r in rows] == [HistoryKind.trial, HistoryKind.trial]  # ended, queued (newest first)
        assert all(r.from_status == r.to_status == before for r in rows)
        assert rows[0].reason.startswith(f"trial #{trial_id} succeeded")
        assert "waiting for a person" in rows[0].reason


@pytest.mark.parametrize("status", DECIDED)
def test_run_this_approach_keeps_the_decided_status(engine, status):
    seed(engine, {"key": "a"})
    decided(engine, "a", status)
    trial_id, before = after_a_trial(
        engine, "a", lambda s: scheduling.run_approach(s, campaign(s), approach(s, "a"), "bob").trial
    )
    assert before == status
    check_kept(engine, "a", trial_id, status)
    # Once a person confirms, that is the new decision.
    with session_scope(engine) as s:
        a = approach(s, "a")
        verdicts.confirm(s, a, s.get(Trial, trial_id), "untested", "try again later", [], "carol")
        assert (a.status, a.pending_trial_id) == ("untested", None)


def test_repeat_keeps_the_decided_status(engine):
    seed(engine, {"key": "a"})
    decided(engine, "a", "adopted")

    def repeat(s):
        _, queued = repeats.start(s, campaign(s), approach(s, "a"), None, 1, "bob")
        return queued[0]

    trial_id, _ = after_a_trial(engine, "a", repeat)
    check_kept(engine, "a", trial_id, "adopted")


def test_run_next_retest_keeps_the_decided_status(engine):
    seed(engine, {"key": "a"})
    decided(engine, "a", "dead_end", ("torch",))
    with session_scope(engine) as s:
        node_a = s.exec(select(Runner).where(Runner.name == "node-a")).one()
        node_a.connected = False  # only the new stack can re-test it
        s.add(node_a)
        runner(s, "node-b", NEW_TORCH)
    with session_scope(engine) as s:
        started = scheduling.run_next(s, campaign(s), "bob")
        assert started.started and started.approach.key == "a"
        assert approach(s, "a").status == "dead_end"
        run_to_end(s, started.trial)
        a = approach(s, "a")
        assert (a.status, a.reason, a.pending_trial_id) == ("dead_end", "dead_end by a person", started.trial.id)


def test_a_cancelled_retest_leaves_no_proposal(engine):
    seed(engine, {"key": "a"})
    decided(engine, "a", "promising")
    with session_scope(engine) as s:
        trial = scheduling.run_approach(s, campaign(s), approach(s, "a"), "bob").trial
        trials.request_cancel(s, trial, "bob")
        run_to_end(s, trial, exit_code=None, outcome="cancelled")
        a = approach(s, "a")
        assert (a.status, a.pending_trial_id) == ("promising", None)
        assert trial.state == TrialState.cancelled
        ended = s.exec(select(StatusChange).order_by(StatusChange.id.desc())).first()
        assert ended.kind == HistoryKind.trial and ended.reason.startswith(f"trial #{trial.id} cancelled")


def test_run_this_and_repeat_apply_one_rule_to_a_waiting_proposal(engine):
    """Item 7: both refuse, with the same reason, while a trial's proposal waits for a person."""
    seed(engine, {"key": "a", "title": "A"})
    with session_scope(engine) as s:
        trial = end_trial(s, approach(s, "a"), runner(s, "node-a", OLD_STACK))
        assert approach(s, "a").pending_trial_id == trial.id
    with session_scope(engine) as s:
        run_this = scheduling.run_approach(s, campaign(s), approach(s, "a"), "bob")
        assert not run_this.started and run_this.trial is None
        with pytest.raises(Invalid) as refused:
            repeats.start(s, campaign(s), approach(s, "a"), None, 3, "bob")
        assert (
            str(refused.value) == run_this.reason == f"A waits for your verdict on trial #{trial.id}: confirm it first"
        )
        assert s.exec(select(Trial).where(Trial.id != trial.id)).first() is None
