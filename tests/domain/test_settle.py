""" "Settle A vs B" and "Repeat A" (app/domain/repeats.py) on SQLite and PostgreSQL: rounds of interleaved
trials go through the normal queue (queue.start_queued gives them to a runner), and the settle stops
when the comparison decides, or when its budget is spent. Trials end the way a runner reports them."""

from __future__ import annotations

import numpy as np
import pytest
from sqlmodel import col, select

from app.db import session_scope
from app.domain import campaigns, queue, repeats, scheduling, trials
from app.domain.errors import Invalid
from app.models import Settle, SettleState, Trial, TrialState
from tests.support.verdicts import OLD_STACK, approach, campaign, run_to_end, runner, seed

pytestmark = pytest.mark.both_databases  # settle and repeat claims under row locks


def _line(center: float, cv: float, n: int, seed: int) -> list[dict]:
    samples = [float(x) for x in np.random.default_rng(seed).normal(center, center * cv, n)]
    return [{"name": "verify_time_ms", "value": float(np.median(samples)), "unit": "ms", "samples": samples}]


def _drain(s, runner_id: int, centers: dict[str, tuple[float, float, int]], limit: int = 40) -> list[str]:
    """Play the runner: take the queue's next trial, end it with metrics, let the settles advance; the
    approach keys in the order their trials ran."""
    ran: list[str] = []
    for n in range(limit):
        repeats.advance_open(s)
        started = queue.start_queued(s, runner_id)
        if started is None:
            return ran
        assert started.approach is not None and started.trial is not None
        key = started.approach.key
        center, cv, count = centers[key]
        run_to_end(s, started.trial, metrics=_line(center, cv, count, seed=n))
        ran.append(key)
    raise AssertionError("the settle never stopped")


def test_settle_queues_interleaved_trials_and_stops_when_decided(engine):
    seed(engine, {"key": "a"}, {"key": "b"})
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        settle, first = repeats.start(s, campaign(s), approach(s, "a"), approach(s, "b"), 6, "alice")
        assert [t.state for t in first] == [TrialState.queued] * 2 and all(t.runner_id is None for t in first)
        assert [t.settle_id for t in first] == [settle.id] * 2
        # Clear: B is 10% faster at 1% noise over 10 samples a trial. One round cannot say it (one trial a
        # side: the run-to-run spread is unknown); the second does.
        ran = _drain(
            s,
            node.id,  # type: ignore[arg-type]
            {"a": (10.0, 0.01, 10), "b": (9.0, 0.01, 10)},
        )
        assert ran == ["a", "b", "a", "b"]
        s.refresh(settle)
        assert settle.state == SettleState.decided and settle.ended_at is not None
        assert settle.outcome == "B vs A on verify_time_ms: faster at 1 of 1 point"
        assert s.exec(select(Trial).where(Trial.state == TrialState.queued)).first() is None


def test_a_settle_of_identical_configurations_stops_once_they_are_shown_equivalent(engine):
    """Not "indistinguishable, needs n samples": the rule decides once the interval lies inside the
    campaign's minimum effect (3%), and not before."""
    seed(engine, {"key": "a"}, {"key": "b"})
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        settle, _ = repeats.start(s, campaign(s), approach(s, "a"), approach(s, "b"), 10, "alice")
        ran = _drain(
            s,
            node.id,  # type: ignore[arg-type]
            {"a": (10.0, 0.01, 20), "b": (10.0, 0.01, 20)},
        )
        s.refresh(settle)
        assert settle.state == SettleState.decided and len(ran) < 20
        assert settle.outcome == "B vs A on verify_time_ms: equivalent at 1 of 1 point"
        assert len(ran) >= 4  # one trial a side never decides


def test_an_undecided_settle_interleaves_rounds_until_its_budget_is_spent(engine):
    seed(engine, {"key": "a"}, {"key": "b"})
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        settle, _ = repeats.start(s, campaign(s), approach(s, "a"), approach(s, "b"), 3, "alice")
        # The same distribution at 12% noise, 3 samples a trial: it would need hundreds of samples.
        ran = _drain(
            s,
            node.id,  # type: ignore[arg-type]
            {"a": (10.0, 0.12, 3), "b": (10.0, 0.12, 3)},
        )
        assert ran == ["a", "b"] * 3
        s.refresh(settle)
        assert settle.state == SettleState.spent and settle.outcome == "3 trials per approach spent, undecided"
        mine = s.exec(select(Trial).where(Trial.settle_id == settle.id).order_by(col(Trial.id))).all()
        assert len(mine) == 6 and all(t.state == TrialState.succeeded for t in mine)


def test_repeat_runs_one_approach_n_times(engine):
    seed(engine, {"key": "a"})
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        settle, _ = repeats.start(s, campaign(s), approach(s, "a"), None, 4, "alice")
        assert (
            _drain(
                s,
                node.id,  # type: ignore[arg-type]
                {"a": (10.0, 0.01, 5)},
            )
            == ["a"] * 4
        )
        s.refresh(settle)
        assert settle.state == SettleState.spent


def test_a_cancelled_trial_stops_the_settle(engine):
    seed(engine, {"key": "a"}, {"key": "b"})
    with session_scope(engine) as s:
        runner(s, "node-a", OLD_STACK)
        settle, first = repeats.start(s, campaign(s), approach(s, "a"), approach(s, "b"), 5, "alice")
        for t in first:
            trials.request_cancel(s, t, "bob")
        assert repeats.advance_open(s) == [settle.campaign_id]
        s.refresh(settle)
        assert settle.state == SettleState.stopped and f"trial #{first[0].id} cancelled" in settle.outcome


@pytest.mark.parametrize(
    ("b", "budget", "words"),
    [("a", 3, "two different approaches"), ("b", 0, "budget"), ("b", 51, "budget")],
)
def test_bad_settles_are_refused_with_a_message(engine, b, budget, words):
    seed(engine, {"key": "a"}, {"key": "b"})
    with session_scope(engine) as s:
        with pytest.raises(Invalid, match=words):
            repeats.start(s, campaign(s), approach(s, "a"), approach(s, b), budget, "alice")
        assert s.exec(select(Settle)).first() is None


def test_an_approach_already_being_tried_is_not_settled(engine):
    seed(engine, {"key": "a"}, {"key": "b"})
    with session_scope(engine) as s:
        runner(s, "node-a", OLD_STACK)
        repeats.start(s, campaign(s), approach(s, "a"), None, 2, "alice")
        with pytest.raises(Invalid, match="already being tried"):
            repeats.start(s, campaign(s), approach(s, "a"), approach(s, "b"), 2, "alice")


def test_what_no_runner_can_run_is_refused_by_repeat_settle_and_run_this_alike(engine):
    """The Kimi demo's FlashInfer PCIe-IPC needs 8 GPUs and sglang: on a node without sglang, Repeat and Settle
    used to queue rounds that waited forever while Run this refused. One check (scheduling.can_run) for all."""
    seed(engine, {"key": "a", "requirements": {"gpus": 8, "software": ["sglang"]}}, {"key": "b"})
    with session_scope(engine) as s:
        runner(s, "node-a", OLD_STACK)  # 8 GPUs, no sglang
        a, b = approach(s, "a"), approach(s, "b")
        said = scheduling.run_approach(s, campaign(s), a, "alice")
        assert not said.trial and said.reason == "A needs sglang: no connected runner has them"
        with pytest.raises(Invalid, match="A needs sglang: no connected runner has them") as refused:
            repeats.start(s, campaign(s), a, None, 3, "alice")
        assert refused.value.field == "a"
        with pytest.raises(Invalid, match="needs sglang") as refused:
            repeats.start(s, campaign(s), b, a, 3, "alice")
        assert refused.value.field == "b"
        assert s.exec(select(Settle)).first() is None and s.exec(select(Trial)).first() is None
        # An archived approach is refused the same way, by every door.
        campaigns.archive_approach(s, campaign(s), b, "alice")
        assert scheduling.run_approach(s, campaign(s), b, "alice").reason == "B is archived: restore it first"
        with pytest.raises(Invalid, match="B is archived: restore it first"):
            repeats.start(s, campaign(s), b, None, 3, "alice")
        assert scheduling.run_next(s, campaign(s), "alice").trial is None  # archived: not a candidate either
        campaigns.restore_approach(s, campaign(s), b)
        settle, queued = repeats.start(s, campaign(s), b, None, 3, "alice")
        assert [t.approach_id for t in queued] == [b.id]
