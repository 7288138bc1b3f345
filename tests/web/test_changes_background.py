"""The hub's change-point pass runs by itself (app/services/lifespan.py starts it): a series that got trials
is read by the pass within a few seconds of their commit, with no page asked; SQLite and PostgreSQL."""

from __future__ import annotations

import time

from sqlmodel import select

from app.db import session_scope
from app.models import ChangeScan
from app.services import changes as changes_service
from app.state import app_state
from tests.support.verdicts import OLD_STACK, approach, end_trial, runner, seed


def test_the_lifespan_pass_reads_new_trials_without_a_request(client, app):
    engine = app_state(app).engine
    seed(engine, {"key": "nccl"})
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        trials = [end_trial(s, approach(s, "nccl"), node) for _ in range(3)]
    deadline = time.monotonic() + 4 * changes_service.POLL_S
    scans: list[ChangeScan] = []
    while time.monotonic() < deadline and not scans:
        time.sleep(0.2)
        with session_scope(engine) as s:
            scans = list(s.exec(select(ChangeScan)))
    assert [(c.runner_id, c.last_trial_id) for c in scans] == [(node.id, trials[-1].id)]
