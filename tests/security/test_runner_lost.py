"""Property 7: a dead runner is noticed in three heartbeats by default (runner_lost_after_s is
3 x heartbeat_s unless set). Against a real `campaign serve`: a runner that connects and then
falls silent (socket open, no heartbeat) goes offline; with the old 30 s default it would not
within the wait below.
"""

from __future__ import annotations

import time

from app.config import Settings
from app.db import make_engine, session_scope
from app.domain import runners as runner_domain
from tests.support.security import api_client
from tests.support.servers import start_live_server, stop_live_server
from tests.support.trials import ProtocolRunner


def test_default_is_three_heartbeats():
    assert Settings(heartbeat_s=5).runner_lost_after_s == 15
    assert Settings(heartbeat_s=0.5).runner_lost_after_s == 1.5
    assert Settings(heartbeat_s=5, runner_lost_after_s=40).runner_lost_after_s == 40  # an explicit value wins


def test_a_silent_runner_goes_offline_after_three_heartbeats(tmp_path):
    db_url = f"sqlite:///{tmp_path / 'lost.db'}"
    server = start_live_server(tmp_path, db_url, "--no-runner", env={"CAMPAIGN_HEARTBEAT_S": "2"})
    engine = make_engine(db_url)
    try:
        with session_scope(engine) as session:
            token = runner_domain.create_runner(session, "silent-node")[1]
        client = api_client(server)
        runner = ProtocolRunner(server.url.replace("http://", "ws://"), token)
        assert runner.welcome.heartbeat_s == 2
        status = lambda: {r["name"]: r["status"] for r in client.get("/api/runners").json()}["silent-node"]  # noqa: E731
        assert status() == "online"
        # Silent from now on. 3 x 2 s plus the once-a-second sweep; 30 s (the old default) is past this wait.
        deadline = time.monotonic() + 20
        while status() != "offline":
            assert time.monotonic() < deadline, "the silent runner was not noticed within 20 s"
            time.sleep(0.2)
        runner.close()
    finally:
        engine.dispose()
        stop_live_server(server)
