"""Verdicts (app.domain.verdicts): what an ended trial proposes, a person's confirmation, re-test flags,
and how they steer "Run next candidate" (scheduling.candidates / run_next). On SQLite and PostgreSQL.

Trials are ended through scheduling itself (create_trial, mark_started, finish with the log), so the
proposal comes from the real classifier over the fixture logs of tests/fixtures/logs.
"""

from __future__ import annotations

import pytest
from sqlmodel import select

from app.db import session_scope
from app.domain import campaigns, proposals, scheduling, trials, verdicts
from app.domain.errors import Invalid
from app.models import ApproachStatus, Runner, Trial, utcnow
from tests.support.verdicts import (
    NEW_NCCL,
    NEW_TORCH,
    NO_TORCH,
    OLD_STACK,
    TWO_GPUS_NEW_TORCH,
    approach,
    campaign,
    dead_end_on_old_stack,
    end_trial,
    fixture_log,
    run_to_end,
    runner,
    seed,
)

# ---- proposals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("log", "signature", "status", "components"),
    [
        ("symm_mem_keyerror_sm120.log", "symm_mem_sm_keyerror", ApproachStatus.dead_end, ["torch", "sm"]),
        ("mscclpp_not_installed.log", "module_not_installed", ApproachStatus.deferred, []),
        # retest: the approach was not really tried (a flag this sglang lacks): parked, bound to sglang.
        ("unknown_flag_sglang059.log", "unknown_flag", ApproachStatus.deferred, ["sglang"]),
        # inconclusive: the approach goes back to untested.
        ("nccl_watchdog_timeout.log", "nccl_error", ApproachStatus.untested, ["nccl"]),
    ],
)
def test_a_failure_signature_proposes_its_status(engine, log, signature, status, components):
    seed(engine, {"key": "a"})
    with session_scope(engine) as s:
        a = approach(s, "a")
        trial = end_trial(s, a, runner(s, "node-a", OLD_STACK), log=fixture_log(log), exit_code=1)
        assert trial.state == "failed"
        assert trial.proposal and trial.proposal["signature"] == signature
        # The trial now waits for a person; the approach is untested until one confirms.
        assert a.pending_trial_id == trial.id and a.status == ApproachStatus.untested
        p = proposals.propose(s, trial)
        assert (p.signature, p.status, p.components) == (signature, status, components)
        assert p.cause == trial.proposal["cause"] and p.reason == trial.proposal["reason"]
        assert p.evidence_line and p.evidence_line in fixture_log(log)


def test_a_success_without_a_reference_is_measured_with_a_metric_summary(engine):
    seed(engine, {"key": "a"}, {"key": "b"})
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        trial = end_trial(
            s,
            approach(s, "a"),
            node,
            metrics=[
                {"name": "server_ready_s", "value": 41.0, "unit": "s"},
                {"name": "output_throughput_tok_s", "value": 95.5, "unit": "tok/s", "tags": {"source": "bench"}},
            ],
        )
        assert trial.state == "succeeded"
        p = proposals.propose(s, trial)
        # No baseline, nothing adopted: the success is "measured", the approach stays open (untested).
        assert p.label == "measured" and p.status == ApproachStatus.untested and not p.signature
        assert p.reason == (
            f"trial #{trial.id} succeeded: output_throughput_tok_s 95.5 tok/s; "
            "measured: no baseline or adopted approach to compare with"
        )
        assert approach(s, "a").pending_trial_id == trial.id
        # Several sizes: the verify size (4 tokens) is the one named.
        trial = end_trial(
            s,
            approach(s, "b"),
            node,
            metrics=[
                {"name": "allreduce_in_situ_us", "value": 30.0, "unit": "us", "tags": {"tokens": 1, "backend": "nccl"}},
                {
                    "name": "allreduce_in_situ_us",
                    "value": 41.25,
                    "unit": "us",
                    "tags": {"tokens": 4, "backend": "nccl"},
                },
            ],
        )
        assert "allreduce_in_situ_us 41.25 us (backend=nccl, tokens=4); measured" in proposals.propose(s, trial).reason


def test_a_failure_without_signature_proposes_untested(engine):
    seed(engine, {"key": "a"})
    with session_scope(engine) as s:
        trial = end_trial(s, approach(s, "a"), runner(s, "node-a", OLD_STACK), log="starting\nbye\n", exit_code=3)
        assert trial.proposal is None
        p = proposals.propose(s, trial)
        assert p.status == ApproachStatus.untested and p.components == []
        assert p.reason == f"trial #{trial.id} failed (exit code 3) with no known failure signature: read its log"


def test_cancelled_and_lost_trials_wait_for_nothing(engine):
    seed(engine, {"key": "a"})
    with session_scope(engine) as s:
        a, node = approach(s, "a"), runner(s, "node-a", OLD_STACK)
        trial = end_trial(s, a, node, exit_code=None, outcome="cancelled")
        assert trial.state == "cancelled" and a.pending_trial_id is None
        trial = scheduling.create_trial(s, a, node, "tester")
        trials.mark_lost(s, trial, "runner went away")
        s.refresh(a)
        assert trial.state == "lost" and a.pending_trial_id is None and a.status == ApproachStatus.untested


# ---- confirmation -------------------------------------------------------------------------------


def test_confirm_records_status_reason_history_stack_and_binding(engine):
    seed(engine, {"key": "a"})
    with session_scope(engine) as s:
        a = approach(s, "a")
        trial = end_trial(
            s, a, runner(s, "node-a", OLD_STACK), log=fixture_log("symm_mem_keyerror_sm120.log"), exit_code=1
        )
        p = proposals.propose(s, trial)
        # The form sends components in any order, maybe twice: kept once each, in display order.
        verdicts.confirm(s, a, trial, p.status, p.reason, ["torch", "sm", "torch"], "alice")
    with session_scope(engine) as s:
        a = approach(s, "a")
        assert a.status == ApproachStatus.dead_end and a.reason == p.reason
        assert a.pending_trial_id is None
        stored = s.get(Trial, trial.id)
        assert stored is not None and a.verdict_fingerprint == OLD_STACK == stored.fingerprint
        assert a.bound_to == {"components": ["sm", "torch"]}
        last = campaigns.history(s, a)[0]
        assert (last.from_status, last.to_status, last.trial_id, last.actor) == (
            "untested",
            "dead_end",
            trial.id,
            "alice",
        )
        assert last.reason == p.reason


def test_confirm_without_a_status_change_still_keeps_history(engine):
    seed(engine, {"key": "a"})
    with session_scope(engine) as s:
        a = approach(s, "a")
        trial = end_trial(
            s, a, runner(s, "node-a", OLD_STACK), log=fixture_log("nccl_watchdog_timeout.log"), exit_code=1
        )
        verdicts.confirm(s, a, trial, "untested", "NCCL hang, not the approach: run it again", [], "alice")
        assert a.status == ApproachStatus.untested and a.pending_trial_id is None and a.bound_to is None
        last = campaigns.history(s, a)[0]
        assert (last.from_status, last.to_status, last.trial_id) == ("untested", "untested", trial.id)
        assert last.reason == "confirmed: NCCL hang, not the approach: run it again"


def test_confirm_refuses_bad_verdicts(engine):
    seed(engine, {"key": "a"}, {"key": "b"})
    with session_scope(engine) as s:
        a, node = approach(s, "a"), runner(s, "node-a", OLD_STACK)
        trial = end_trial(s, a, node, log="boom", exit_code=1)
        with pytest.raises(Invalid, match="unknown stack component.*kernel") as exc:
            verdicts.confirm(s, a, trial, "dead_end", "x", ["torch", "kernel"], "alice")
        assert exc.value.field == "components"
        with pytest.raises(Invalid, match="needs a reason"):
            verdicts.confirm(s, a, trial, "dead_end", "  ", [], "alice")
        with pytest.raises(Invalid, match="'running' is not a verdict"):
            verdicts.confirm(s, a, trial, "running", "x", [], "alice")
        with pytest.raises(Invalid, match="'exploded' is not a verdict"):
            verdicts.confirm(s, a, trial, "exploded", "x", [], "alice")
        with pytest.raises(Invalid, match="is not a trial of B"):
            verdicts.confirm(s, approach(s, "b"), trial, "dead_end", "x", [], "alice")
        running = scheduling.create_trial(s, approach(s, "b"), node, "tester")
        with pytest.raises(Invalid, match="has not ended"):
            verdicts.confirm(s, approach(s, "b"), running, "dead_end", "x", [], "alice")
        s.refresh(a)
        assert a.pending_trial_id == trial.id and a.status == ApproachStatus.untested


def test_a_plain_status_change_by_a_person_clears_pending(engine):
    seed(engine, {"key": "a"})
    with session_scope(engine) as s:
        a = approach(s, "a")
        end_trial(s, a, runner(s, "node-a", OLD_STACK), log="boom", exit_code=1)
        assert a.pending_trial_id is not None
        campaigns.change_status(s, a, "deferred", "needs a patched sglang", "alice")
        assert a.pending_trial_id is None
        assert verdicts.pending(s, campaign(s)) == []


def test_a_verdict_on_an_older_trial_leaves_the_newer_one_waiting(engine):
    seed(engine, {"key": "a"})
    with session_scope(engine) as s:
        a, node = approach(s, "a"), runner(s, "node-a", OLD_STACK)
        old = end_trial(s, a, node, log="boom", exit_code=1)
        new = end_trial(s, a, node, log="boom again", exit_code=1)
        verdicts.confirm(s, a, old, "deferred", "needs a build", [], "alice")
        assert a.pending_trial_id == new.id
        assert [(x.key, t.id) for x, t in verdicts.pending(s, campaign(s))] == [("a", new.id)]


# ---- re-test flags --------------------------------------------------------------------------


def test_a_bound_verdict_is_flagged_when_a_capable_runner_has_another_version(engine):
    seed(engine, {"key": "a"})
    with session_scope(engine) as s:
        a = dead_end_on_old_stack(s, "a")
        assert verdicts.retest_flags(s, campaign(s)) == {}  # only the stack it was reached on
        runner(s, "node-b", NEW_TORCH)
        assert verdicts.retest_flags(s, campaign(s)) == {a.id: "re-test: torch 2.10.0+cu128 -> 2.11.0 (on node-b)"}


@pytest.mark.parametrize(
    "case",
    [
        "same stack",
        "unbound component changed",
        "runner does not report it",
        "disconnected",
        "revoked",
        "cannot meet requirements",
        "not bound",
    ],
)
def test_no_retest_flag(engine, case):
    seed(engine, {"key": "a"})
    with session_scope(engine) as s:
        a = dead_end_on_old_stack(s, "a", [] if case == "not bound" else ["torch", "sm"])
        if case == "same stack":
            runner(s, "node-b", {**OLD_STACK, "hostname": "node-b"})
        elif case == "unbound component changed":
            runner(s, "node-b", NEW_NCCL)
        elif case == "runner does not report it":
            runner(s, "node-b", NO_TORCH)
        elif case == "disconnected":
            runner(s, "node-b", NEW_TORCH, connected=False)
        elif case == "revoked":
            runner(s, "node-b", NEW_TORCH).revoked_at = utcnow()  # still marked connected
            s.flush()
        elif case == "cannot meet requirements":
            runner(s, "node-b", TWO_GPUS_NEW_TORCH)  # the approach needs 8 GPUs
        elif case == "not bound":
            assert a.bound_to is None
            runner(s, "node-b", NEW_TORCH)
        assert verdicts.retest_flags(s, campaign(s)) == {}
        assert scheduling.candidates(s, campaign(s)) == []


def test_an_unbound_change_next_to_a_bound_one_names_only_the_bound_one(engine):
    seed(engine, {"key": "a"})
    with session_scope(engine) as s:
        a = dead_end_on_old_stack(s, "a", ["nccl"])
        runner(s, "node-b", NEW_TORCH)
        assert verdicts.retest_flags(s, campaign(s)) == {}
        runner(s, "node-c", {**NEW_NCCL, "torch": "2.11.0"})
        assert verdicts.retest_flags(s, campaign(s)) == {a.id: "re-test: NCCL 2.27.3 -> 2.28.9 (on node-c)"}


# ---- what runs next -------------------------------------------------------------------------


def test_candidates_untested_by_priority_then_flagged_skipping_pending(engine):
    seed(
        engine,
        {"key": "flagged"},
        {"key": "u1"},
        {"key": "waits"},
        {"key": "norecipe", "recipe": None},
        {"key": "u2"},
        {"key": "done"},
    )
    with session_scope(engine) as s:
        dead_end_on_old_stack(s, "flagged")
        dead_end_on_old_stack(s, "done", ["nccl"])  # bound to a component nobody changed
        node = s.exec(select(Runner)).first()
        assert node is not None
        end_trial(s, approach(s, "waits"), node, log="boom", exit_code=1)
        assert [a.key for a in scheduling.candidates(s, campaign(s))] == ["u1", "u2"]
        runner(s, "node-b", NEW_TORCH)
        assert [a.key for a in scheduling.candidates(s, campaign(s))] == ["u1", "u2", "flagged"]


def test_run_next_runs_a_retest_on_the_runner_whose_stack_differs(engine):
    seed(engine, {"key": "a"})
    with session_scope(engine) as s:
        dead_end_on_old_stack(s, "a")  # node-a (lower id, idle) has the verdict's own stack
        runner(s, "node-b", NEW_TORCH)
        started = scheduling.run_next(s, campaign(s), "alice")
        assert started.started and started.approach and started.runner and started.trial
        assert started.approach.key == "a" and started.runner.name == "node-b"
        assert started.trial.fingerprint and started.trial.fingerprint["torch"] == "2.11.0"


def test_run_next_says_when_everything_waits_for_a_verdict(engine):
    seed(engine, {"key": "a", "title": "Symmetric memory"}, {"key": "b", "title": "NCCL tree"})
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        end_trial(s, approach(s, "a"), node, log="boom", exit_code=1)
        out = scheduling.run_next(s, campaign(s), "alice")
        assert out.started and out.approach and out.trial
        assert out.approach.key == "b"  # a waits; b is next
        run_to_end(s, out.trial, exit_code=0)
        out = scheduling.run_next(s, campaign(s), "alice")
        assert not out.started
        assert out.reason == "nothing to run until a verdict is confirmed: Symmetric memory, NCCL tree wait for yours"
        a = approach(s, "a")
        pending = s.get(Trial, a.pending_trial_id)
        assert pending is not None
        verdicts.confirm(s, a, pending, "deferred", "needs a build", [], "alice")
        out = scheduling.run_next(s, campaign(s), "alice")
        assert out.reason == "nothing to run until a verdict is confirmed: NCCL tree waits for yours"


@pytest.mark.parametrize("outcome", ["cancelled", "lost"])
def test_a_retest_that_measured_nothing_keeps_the_verdict(engine, outcome):
    """A re-test cancelled (or lost with its runner) leaves the dead end and its reason as they were."""
    seed(engine, {"key": "a"})
    with session_scope(engine) as s:
        dead_end_on_old_stack(s, "a")
        runner(s, "node-b", NEW_TORCH)
        started = scheduling.run_next(s, campaign(s), "alice")
        assert started.trial is not None
        assert approach(s, "a").status == "dead_end"  # being re-tested: the activity, beside the verdict
        if outcome == "cancelled":
            run_to_end(s, started.trial, exit_code=None, outcome="cancelled")
        else:
            trials.mark_lost(s, started.trial, "runner stopped answering")
        a = approach(s, "a")
        assert (a.status, a.reason) == ("dead_end", "KeyError: 12 in symmetric memory")
        assert a.pending_trial_id is None
        # Still flagged: the re-test has not happened yet.
        assert a.id in verdicts.retest_flags(s, campaign(s))
