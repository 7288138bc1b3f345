"""Property 4: no "database is locked". Logins (which write: the link is spent, a session opened)
while runners connect (which write: the runner row, its fingerprint), all at once, against a real
`campaign serve` on SQLite and PostgreSQL: every login succeeds, nothing answers 500.

Structurally: app.db has one session factory; a transaction that may write says so up front and
takes the write lock first (BEGIN IMMEDIATE on SQLite); a read-only one refuses writes at once
(`ReadOnlyTransaction`), which the last test checks.
"""

from __future__ import annotations

import threading

import httpx
import pytest

from app.db import ReadOnlyTransaction, make_engine, open_session, session_scope
from app.domain import runners as runner_domain
from app.domain.logins import create_login_token
from app.models import Campaign
from tests.support.servers import start_live_server, stop_live_server
from tests.support.trials import ProtocolRunner

pytestmark = pytest.mark.both_databases  # concurrent writers: SQLite's write lock, PostgreSQL's row locks


def test_logins_during_runner_connects_never_fail(tmp_path, board_db):
    server = start_live_server(tmp_path, board_db, "--no-runner")
    engine = make_engine(board_db)
    try:
        with session_scope(engine) as session:
            login_urls = [f"/login?token={create_login_token(session, 600)}" for _ in range(24)]
            runner_tokens = [runner_domain.create_runner(session, f"node-{i}")[1] for i in range(4)]
        ws_url = server.url.replace("http://", "ws://")
        statuses: list[int] = []
        errors: list[BaseException] = []
        start = threading.Barrier(len(login_urls) + len(runner_tokens))

        def log_in(url: str) -> None:
            start.wait()
            with httpx.Client(base_url=server.url, timeout=120) as client:
                statuses.append(client.get(url, follow_redirects=False).status_code)
                statuses.append(client.get("/").status_code)

        def connect_repeatedly(token: str) -> None:
            start.wait()
            try:
                for _ in range(4):
                    runner = ProtocolRunner(ws_url, token)
                    runner.heartbeat()
                    runner.close()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=log_in, args=(u,)) for u in login_urls]
        threads += [threading.Thread(target=connect_repeatedly, args=(t,)) for t in runner_tokens]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert sorted(statuses) == sorted([303, 200] * len(login_urls)), statuses
        log = server.log.read_text()
        assert "database is locked" not in log and "Traceback" not in log, log[-3000:]
    finally:
        engine.dispose()
        stop_live_server(server)


def test_a_write_in_a_read_only_transaction_fails_at_once(tmp_path):
    from app.db import migrate

    url = f"sqlite:///{tmp_path / 'ro.db'}"
    migrate(url)
    engine = make_engine(url)
    with open_session(engine, write=False) as session:
        session.add(Campaign(slug="x", name="X"))
        with pytest.raises(ReadOnlyTransaction):
            session.flush()
    engine.dispose()
