"""The trial state machine's table (app/domain/trials.py): every change goes through `advance`, and a
change the table does not list is refused. Pure: no database."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from app.domain.trials import ENDING_EVENT, TRANSITIONS, IllegalTransition, TrialEvent, advance, can
from app.models import ACTIVE_TRIAL_STATES, TERMINAL_TRIAL_STATES, TrialState


def test_the_state_sets_split_every_state():
    assert set(ACTIVE_TRIAL_STATES) | set(TERMINAL_TRIAL_STATES) == set(TrialState)
    assert not set(ACTIVE_TRIAL_STATES) & set(TERMINAL_TRIAL_STATES)


@pytest.mark.parametrize("state", TERMINAL_TRIAL_STATES)
@pytest.mark.parametrize("event", list(TrialEvent))
def test_an_ended_trial_takes_no_event(state, event):
    row = SimpleNamespace(state=state.value)
    assert not can(state, event)
    with pytest.raises(IllegalTransition, match=f"A {state.value} trial cannot"):
        advance(row, event)
    assert row.state == state.value  # unchanged


def test_the_lifecycle_goes_through_the_table():
    row = SimpleNamespace(state=TrialState.queued.value)
    assert advance(row, TrialEvent.dispatch) == TrialState.dispatched
    assert advance(row, TrialEvent.phase) == TrialState.dispatched
    assert advance(row, TrialEvent.start) == TrialState.running
    assert advance(row, TrialEvent.cancel_request) == TrialState.running
    assert advance(row, TrialEvent.succeed) == TrialState.succeeded
    assert row.state == TrialState.succeeded


@pytest.mark.parametrize(
    ("state", "event"),
    [
        (TrialState.dispatched, TrialEvent.dispatch),  # a new attempt is a new trial's, never a re-dispatch here
        (TrialState.running, TrialEvent.dispatch),
        (TrialState.running, TrialEvent.start),
    ],
)
def test_no_going_back(state, event):
    with pytest.raises(IllegalTransition):
        advance(SimpleNamespace(state=state.value), event)


def test_every_active_state_can_end_every_way():
    for state in ACTIVE_TRIAL_STATES:
        for ended, event in ENDING_EVENT.items():
            assert TRANSITIONS[(state, event)] == ended
    assert set(ENDING_EVENT) == set(TERMINAL_TRIAL_STATES)
