"""A runner's old socket closing must not mark it offline once a newer socket of it has registered: a
fast reconnect's hello sets `connected`, and the old socket's late "offline" would overwrite it (the
runner would then take no queued work and show offline while connected)."""

from __future__ import annotations

import pytest

from app.db import session_scope
from app.domain import runners as runner_domain
from app.models import Runner

pytestmark = pytest.mark.both_databases  # the runner row lock (FOR KEY SHARE) of a disconnect


def _runner(engine) -> int:
    with session_scope(engine) as s:
        runner, _ = runner_domain.create_runner(s, "node-a")
        runner.connected = True
        s.add(runner)
        s.flush()
        return runner.id  # type: ignore[return-value]


def test_the_old_socket_closing_after_a_reconnect_leaves_the_runner_connected(engine):
    runner_id = _runner(engine)
    with session_scope(engine) as s:
        runner_domain.mark_disconnected(s, runner_id, reconnected=lambda: True)
    with session_scope(engine) as s:
        assert s.get(Runner, runner_id).connected is True  # type: ignore[union-attr]


def test_a_socket_closing_with_no_newer_one_marks_the_runner_offline(engine):
    runner_id = _runner(engine)
    with session_scope(engine) as s:
        runner_domain.mark_disconnected(s, runner_id, reconnected=lambda: False)
    with session_scope(engine) as s:
        runner = s.get(Runner, runner_id)
        assert runner is not None and runner.connected is False and runner.last_seen_at is not None
