# mypy: disable-error-code="union-attr, arg-type"
# (each test asserts the optional parts it reads: `result.queued`, a started trial's runner)
"""The queue (app/domain/queue.py) on SQLite and PostgreSQL: "run this" and "run next" queue a trial while
the runners that can run it are busy; a runner that frees up takes the queued trials in priority order (not
the order they were queued), skipping those it cannot run; a queued trial can be cancelled; the lost-runner
sweep leaves queued trials alone."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlmodel import col, select

from app.db import session_scope
from app.domain import queue, scheduling, trials
from app.domain import runners as runner_domain
from app.models import Approach, ApproachStatus, Attempt, Runner, StatusChange, Trial, TrialState, utcnow
from tests.support.verdicts import (
    OLD_STACK,
    TWO_GPUS_NEW_TORCH,
    approach,
    campaign,
    doing,
    run_to_end,
    runner,
    seed,
)

pytestmark = pytest.mark.both_databases  # queue claims: FOR UPDATE SKIP LOCKED on PostgreSQL


def run_this(engine, key: str, actor: str = "alice", slug: str = "c") -> scheduling.RunNext:
    with session_scope(engine) as s:
        return scheduling.run_approach(s, campaign(s, slug), approach(s, key, slug), actor)


def free(engine, trial_id: int, runner_id: int) -> str | None:
    """End the runner's trial the way it reports it, then (as app/services does, after that commit) give
    the runner the queue's next trial: the key of the approach it started, or None."""
    with session_scope(engine) as s:
        run_to_end(s, s.get(Trial, trial_id))
    with session_scope(engine) as s:
        started = queue.start_queued(s, runner_id)
        if started is None:
            return None
        assert started.dispatch.trial_id == started.trial.id and started.trial.runner_id == runner_id
        assert started.dispatch.attempt_id == started.trial.attempt_id and started.trial.state == "dispatched"
        return started.approach.key


def queued_keys(engine, slug: str = "c") -> list[tuple[int, str]]:
    with session_scope(engine, write=False) as s:
        return [(q.position, q.approach.key) for q in queue.campaign_queue(s, campaign(s, slug))]


def test_queued_trials_start_in_priority_order_not_the_order_they_were_queued(engine):
    seed(engine, *({"key": f"p{n}", "requirements": None} for n in range(1, 5)))
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK).id
    first = run_this(engine, "p4")
    assert first.started and first.runner.id == node
    for key in ("p3", "p1", "p2"):  # queued in this order, lowest priority first
        result = run_this(engine, key)
        assert result.queued and not result.started and result.dispatch is None and result.runner is None
        assert result.reason == f"{key.upper()} waits in the queue for a free runner (node-a is busy)"
    assert queued_keys(engine) == [(1, "p1"), (2, "p2"), (3, "p3")]
    with session_scope(engine, write=False) as s:
        waiting = s.exec(select(Trial).where(Trial.state == TrialState.queued)).all()
        assert len(waiting) == 3 and all(t.runner_id is None and t.attempt_id is None for t in waiting)
        assert {t.requested_by for t in waiting} == {"alice"}
        assert len(s.exec(select(Attempt)).all()) == 1
        assert approach(s, "p1").status == ApproachStatus.untested
        assert doing(s, "p1").activity == "queued"
        change = s.exec(select(StatusChange).order_by(StatusChange.id.desc())).first()
        assert change.reason.endswith("waits for a free runner") and change.actor == "alice"

    order: list[str] = []
    trial_id = first.trial.id
    while True:
        started = free(engine, trial_id, node)
        if started is None:
            break
        order.append(started)
        with session_scope(engine, write=False) as s:
            trial_id = s.exec(select(Trial).where(Trial.state == TrialState.dispatched)).one().id
            assert doing(s, started).activity == "queued"  # running once the runner says started
    assert order == ["p1", "p2", "p3"]
    assert queued_keys(engine) == []


def test_a_runner_takes_the_first_queued_trial_it_can_run(engine):
    seed(engine, {"key": "big", "title": "Eight GPUs"}, {"key": "small", "requirements": {"gpus": 2}})
    with session_scope(engine) as s:
        big_node = runner(s, "big-node", OLD_STACK).id
        small_node = runner(s, "small-node", TWO_GPUS_NEW_TORCH).id
        # Both runners busy with trials of another campaign.
    seed(engine, {"key": "x", "requirements": None}, {"key": "y", "requirements": None}, slug="other")
    held = {}
    for key in ("x", "y"):
        result = run_this(engine, key, slug="other")
        held[result.runner.id] = result.trial.id
    assert set(held) == {big_node, small_node}
    assert run_this(engine, "big").queued
    assert run_this(engine, "small").queued
    assert queued_keys(engine) == [(1, "big"), (2, "small")]
    # The small node frees up first: it cannot run "big" (8 GPUs), so it takes "small".
    assert free(engine, held[small_node], small_node) == "small"
    assert queued_keys(engine) == [(1, "big")]
    assert free(engine, held[big_node], big_node) == "big"


def test_campaigns_take_turns_by_their_oldest_queued_trial(engine):
    seed(engine, {"key": "busy", "requirements": None}, {"key": "late", "requirements": None}, slug="a")
    seed(engine, {"key": "first", "requirements": None}, slug="b")
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK).id
        s.exec(select(Approach).where(Approach.key == "late")).one().position = 9
    holding = run_this(engine, "busy", slug="a").trial.id
    assert run_this(engine, "late", slug="a").queued  # priority 9 in campaign a, queued first
    assert run_this(engine, "first", slug="b").queued  # priority 1 in campaign b, queued later
    assert free(engine, holding, node) == "late"


def test_a_queued_trial_is_cancelled_without_a_runner(engine):
    seed(
        engine,
        {"key": "a", "requirements": None},
        {"key": "b", "requirements": None},
        {"key": "c", "requirements": None},
    )
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK).id
    holding = run_this(engine, "a").trial.id
    b = run_this(engine, "b").trial.id
    assert run_this(engine, "c").queued
    with session_scope(engine) as s:
        trial = queue.lock_trial(s, b)
        assert trials.request_cancel(s, trial, "bob") is None  # nothing to push: no runner holds it
        assert trial.state == TrialState.cancelled and trial.runner_id is None and trial.attempt_id is None
        assert trial.started_at is None and trial.finished_at is not None  # it never ran
        assert approach(s, "b").status == ApproachStatus.untested  # back to what it was
        back = s.exec(
            select(StatusChange).where(StatusChange.trial_id == b).order_by(col(StatusChange.id).desc())
        ).first()
        assert back is not None and back.actor == "bob"  # the person who cancelled, not "runner"
        assert approach(s, "b").pending_trial_id is None  # a cancelled trial asks no verdict
    assert queued_keys(engine) == [(1, "c")]
    assert free(engine, holding, node) == "c"
    assert run_this(engine, "b").queued  # the runner is busy with "c": "b" waits again
    assert queued_keys(engine) == [(1, "b")]


def test_no_runner_for_a_queued_trial_that_is_busy_offline_or_revoked(engine):
    seed(engine, {"key": "a", "requirements": None}, {"key": "b", "requirements": None})
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK).id
        other = runner(s, "node-b", OLD_STACK, connected=False).id
    holding = run_this(engine, "a").trial.id
    queued_id = run_this(engine, "b").trial.id
    with session_scope(engine) as s:
        assert queue.start_queued(s, node) is None  # busy
        assert queue.start_queued(s, other) is None  # offline
        assert queue.start_queued(s, node, online={other}) is None  # its socket is not held here
    with session_scope(engine) as s:
        runner_domain.mark_connected(s, s.get(Runner, other), OLD_STACK, [])
        runner_domain.revoke_runner(s, s.get(Runner, other))
    with session_scope(engine) as s:
        assert queue.start_queued(s, other) is None  # revoked
        assert s.get(Trial, queued_id).state == TrialState.queued
    assert free(engine, holding, node) == "b"


def test_the_lost_runner_sweep_leaves_queued_trials_alone(engine):
    seed(engine, {"key": "a", "requirements": None}, {"key": "b", "requirements": None})
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        node.last_seen_at = utcnow() - timedelta(hours=1)
        s.add(node)
    holding = run_this(engine, "a").trial.id
    queued_id = run_this(engine, "b").trial.id
    with session_scope(engine) as s:
        s.get(Trial, queued_id).created_at = utcnow() - timedelta(hours=1)  # waiting long: still not lost
        lost, _ = trials.sweep_lost(s, 60, {})
        assert [t.id for t in lost] == [holding]
    with session_scope(engine, write=False) as s:
        queued = s.get(Trial, queued_id)
        assert (queued.state, queued.runner_id, queued.error) == (TrialState.queued, None, "")
        assert doing(s, "b").activity == "queued"
    assert queued_keys(engine) == [(1, "b")]


def _take(engine, barrier, outcomes: dict, node: int) -> None:
    barrier.wait()
    with session_scope(engine) as s:
        started = queue.start_queued(s, node)
        outcomes[f"runner {node}"] = started.trial.id if started else None


def _cancel(engine, barrier, outcomes: dict, trial_id: int) -> None:
    barrier.wait()
    with session_scope(engine) as s:
        trial = queue.lock_trial(s, trial_id)
        outcomes["cancel"] = trials.request_cancel(s, trial, "bob") if trial.state == "queued" else "late"


def test_runners_freeing_at_once_and_a_cancel_never_share_a_queued_trial(engine):
    """Concurrent transactions (threads, a session each): two runners take the queue at once while a
    person cancels its first trial. Each trial ends up with one outcome: started on one runner, or
    cancelled with no runner, never both and never on two runners (row locks, SKIP LOCKED on PostgreSQL;
    BEGIN IMMEDIATE on SQLite)."""
    import threading

    seed(engine, *({"key": f"q{n}", "requirements": None} for n in range(1, 8)))
    seed(engine, {"key": "x", "requirements": None}, {"key": "y", "requirements": None}, slug="hold")
    with session_scope(engine) as s:
        nodes = [runner(s, "node-a", OLD_STACK).id, runner(s, "node-b", OLD_STACK).id]
    for round_ in range(3):
        held = [run_this(engine, key, slug="hold").trial.id for key in ("x", "y")]
        waiting = [run_this(engine, f"q{n}").trial.id for n in (2 * round_ + 1, 2 * round_ + 2)]
        with session_scope(engine) as s:
            for trial_id in held:  # both runners free up at once
                run_to_end(s, s.get(Trial, trial_id))
        barrier = threading.Barrier(3)
        outcomes: dict[str, object] = {}
        threads = [threading.Thread(target=_take, args=(engine, barrier, outcomes, n)) for n in nodes]
        threads.append(threading.Thread(target=_cancel, args=(engine, barrier, outcomes, waiting[0])))
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        taken = [outcomes[f"runner {n}"] for n in nodes]
        assert len([t for t in taken if t is not None]) == len({t for t in taken if t is not None}), outcomes
        with session_scope(engine) as s:
            for trial_id in waiting:
                trial = s.get(Trial, trial_id)
                if trial.state == TrialState.cancelled:
                    assert trial.runner_id is None and trial_id not in taken, outcomes
                else:
                    assert trial.state == TrialState.dispatched and taken.count(trial_id) == 1, outcomes
            # Clear the board for the next round: end what started, cancel what still waits.
            for trial in s.exec(select(Trial).where(col(Trial.state).in_(["dispatched", "queued"]))).all():
                if trial.state == "queued":
                    trials.request_cancel(s, trial, "bob")
                else:
                    run_to_end(s, trial)
            for a in s.exec(select(Approach)).all():
                a.pending_trial_id = None  # no verdicts needed here: "run this" may take them again
