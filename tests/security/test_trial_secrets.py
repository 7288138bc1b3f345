"""Property 2: trials never see the runner's or the server's secrets.

A real `campaign serve` with its embedded runner (real processes) runs a `command` trial whose argv
is `env`: its output has the node's ordinary variables and the approach's own, and none of the
secrets (secret key, runner token, database URL and password, libpq password). A second trial
finds no secret in the runner's environment through /proc either.
"""

from __future__ import annotations

import sys
import time

from app.db import make_engine
from tests.support.security import DB_PASSWORD, api_client
from tests.support.servers import start_live_server, stop_live_server
from tests.support.trials import seed_campaign

PROC_PEEK = (
    "import os\n"
    "try:\n"
    "    print('runner environ:', open(f'/proc/{os.getppid()}/environ', 'rb').read())\n"
    "except OSError as exc:\n"
    "    print('runner environ unreadable:', type(exc).__name__)\n"
)


def _run_and_read_log(client, slug: str) -> str:
    for _ in range(120):  # the embedded runner connects on its own shortly after the server listens
        body = client.post(f"/api/campaigns/{slug}/run-next").json()
        if body["started"]:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"nothing started: {body}")
    trial_id = body["trial_id"]
    for _ in range(240):
        state = client.get(f"/api/trials/{trial_id}").json()["state"]
        if state not in ("queued", "dispatched", "running"):
            break
        time.sleep(0.25)
    assert state == "succeeded", state
    return client.get(f"/api/trials/{trial_id}/log").text


def test_env_trial_prints_no_secret(tmp_path, board_db):
    secret_key = "secret-key-" + "5d8e0a41b2"
    server = start_live_server(
        tmp_path,
        board_db,
        env={
            "CAMPAIGN_SECRET_KEY": secret_key,
            "PGPASSWORD": "pg-env-password-77",
            "NODE_ORDINARY_SETTING": "visible-42",
        },
    )
    engine = make_engine(board_db)
    try:
        seed_campaign(
            engine,
            "env",
            [
                {
                    "key": "env",
                    "title": "Print the environment",
                    "recipe": {
                        "kind": "command",
                        "params": {"argv": ["env"]},
                        "env": {"DECLARED_BY_APPROACH": "yes"},
                        "timeout_s": 60,
                    },
                },
                {
                    "key": "peek",
                    "title": "Read the runner's environ",
                    "recipe": {
                        "kind": "command",
                        "params": {"argv": [sys.executable, "-c", PROC_PEEK]},
                        "timeout_s": 60,
                    },
                },
            ],
        )
        client = api_client(server)
        log = _run_and_read_log(client, "env")
        variables = dict(line.split("=", 1) for line in log.splitlines() if "=" in line)
        assert variables.get("NODE_ORDINARY_SETTING") == "visible-42"  # the node's ordinary environment
        assert variables.get("DECLARED_BY_APPROACH") == "yes"  # what the approach declares
        assert "PATH" in variables
        for secret in (secret_key, DB_PASSWORD, "pg-env-password-77", "cbr_", "cbt_", "login_"):
            assert secret not in log, secret
        # Of the board's variables only the attempt's marker and where to leave artifacts (no secret in either).
        assert sorted(k for k in variables if k.startswith("CAMPAIGN_")) == [
            "CAMPAIGN_ARTIFACTS_DIR",
            "CAMPAIGN_ATTEMPT_ID",
        ]
        assert "PGPASSWORD" not in variables and "CAMPAIGN_RUNNER_TOKEN" not in variables

        # The first approach now waits for its verdict, so run-next picks the second one.
        peek = _run_and_read_log(client, "env")
        # Unreadable for an ordinary user (the runner is not dumpable); as root it is readable, and
        # it still holds no secret: the token came through a pipe, the server's secrets were left out.
        assert "runner environ" in peek
        for secret in (secret_key, DB_PASSWORD, "pg-env-password-77", "cbr_", "CAMPAIGN_RUNNER_TOKEN"):
            assert secret not in peek, secret
    finally:
        engine.dispose()
        stop_live_server(server)
