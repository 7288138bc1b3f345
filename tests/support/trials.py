"""Helpers for trials tests: settings for a ThreadServer (tests.support.servers), seeded campaigns, runner
tokens, a runner stand-in that speaks app/protocol/messages.py over a real websocket, and the real runner
(`campaign runner`) as its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import connect
from websockets.typing import Origin

from app.config import Settings
from app.db import session_scope
from app.domain import logs as log_domain
from app.domain import runners as runner_domain
from app.models import Approach, Campaign, Trial
from app.protocol.messages import AttemptRef, Finished, Heartbeat, Hello, LogChunkMsg, Started, parse_server_message
from app.security import SESSION_COOKIE
from runners.process import STARTED_PREFIX
from tests.support.paths import ROOT
from tests.support.servers import ThreadServer


def make_settings(tmp_path: Path, db_url: str | None = None, **overrides: Any) -> Settings:
    values: dict[str, Any] = dict(
        data_dir=tmp_path / "data",
        database_url=db_url or f"sqlite:///{tmp_path / 'trials.db'}",
        embedded_runner=False,
        secret_key="trials-" + uuid.uuid4().hex,
        heartbeat_s=0.5,
        runner_lost_after_s=4.0,
        cancel_grace_s=1.0,
    )
    values.update(overrides)
    return Settings(**values)


def seed_campaign(engine, slug: str = "spec", approaches: list[dict[str, Any]] | None = None) -> None:
    """A campaign with approaches (dicts of Approach fields; position follows the list order)."""
    with session_scope(engine) as session:
        campaign = Campaign(slug=slug, name=slug.title())
        session.add(campaign)
        session.flush()
        assert campaign.id is not None
        for pos, fields in enumerate(approaches or [], start=1):
            session.add(Approach(campaign_id=campaign.id, position=pos, **fields))


def command_recipe(*argv: str, timeout_s: float = 60) -> dict[str, Any]:
    return {"kind": "command", "params": {"argv": list(argv)}, "timeout_s": timeout_s}


def python_recipe(script: str, timeout_s: float = 120) -> dict[str, Any]:
    """A command recipe that runs `script` (dedented) in this Python, unbuffered."""
    return command_recipe(sys.executable, "-u", "-c", textwrap.dedent(script), timeout_s=timeout_s)


def new_runner_token(engine, name: str | None = None) -> tuple[int, str]:
    with session_scope(engine) as session:
        runner, token = runner_domain.create_runner(session, name or f"node-{uuid.uuid4().hex[:6]}")
        return runner.id, token  # type: ignore[return-value]


FINGERPRINT: dict[str, Any] = {
    "hostname": "stand-in",
    "gpu_count": 8,
    "gpus": [{"name": "H200", "sm": "9.0"}] * 8,
    "sm": "9.0",
    "torch": "2.11.0",
    "nccl": "2.27.3",
    "cuda": "12.8",
    "sglang": None,
}


class ProtocolRunner:
    """A runner stand-in over a real websocket: sends what a runner sends, records what it gets."""

    def __init__(
        self,
        ws_url: str,
        token: str,
        fingerprint: dict[str, Any] | None = None,
        attempts: list[AttemptRef] | None = None,
    ) -> None:
        self.ws = connect(
            f"{ws_url}/api/runners/ws",
            additional_headers={"Authorization": f"Bearer {token}"},
            open_timeout=10,
            max_size=16 * 1024 * 1024,
            max_queue=None,
        ).__enter__()
        self.ws.send(
            Hello(
                runner_version="test", fingerprint=fingerprint or FINGERPRINT, attempts=attempts or []
            ).model_dump_json()
        )
        self.welcome = self.recv()
        assert self.welcome.type == "welcome", self.welcome

    def recv(self, timeout: float = 10):
        return parse_server_message(self.ws.recv(timeout=timeout))

    def expect(self, kind: str, timeout: float = 30, skip: tuple[str, ...] = ("ack",)):
        deadline = time.monotonic() + timeout
        while True:
            msg = self.recv(max(0.01, deadline - time.monotonic()))
            if msg.type == kind:
                return msg
            assert msg.type in skip, f"expected {kind}, got {msg}"

    def send(self, message) -> None:
        self.ws.send(message.model_dump_json())

    def started(self, d) -> None:
        self.send(Started(trial_id=d.trial_id, attempt_id=d.attempt_id, pid=os.getpid()))

    def log(self, d, seq: int, offset: int, data: str) -> None:
        self.send(LogChunkMsg(trial_id=d.trial_id, attempt_id=d.attempt_id, seq=seq, offset=offset, data=data))

    def finished(self, d, exit_code: int = 0, last_seq: int = -1, outcome: str = "exited") -> None:
        self.send(
            Finished(
                trial_id=d.trial_id, attempt_id=d.attempt_id, exit_code=exit_code, last_seq=last_seq, outcome=outcome
            )
        )

    def heartbeat(self, attempts: list[AttemptRef] | None = None) -> None:
        self.send(Heartbeat(attempts=attempts or []))

    def acks(self, count: int, timeout: float = 10) -> list[int]:
        seqs: list[int] = []
        while len(seqs) < count:
            msg = self.recv(timeout)
            if msg.type == "ack":
                seqs.append(msg.seq)
        return seqs

    def close(self) -> None:
        self.ws.close()


def run_next(srv: ThreadServer, slug: str = "spec", headers: dict[str, str] | None = None) -> dict[str, Any]:
    r = httpx.post(f"{srv.url}/api/campaigns/{slug}/run-next", headers=headers or srv.api_headers(), timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def trial(srv: ThreadServer, trial_id: int, headers: dict[str, str] | None = None) -> dict[str, Any]:
    r = httpx.get(f"{srv.url}/api/trials/{trial_id}", headers=headers or srv.api_headers(), timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def viewer_messages(srv: ThreadServer, trial_id: int, after: int = -1, until=None, timeout: float = 15) -> list[dict]:
    """Follow a trial's live log as a browser would (session cookie, same Origin) until `until(msgs)`."""
    msgs: list[dict] = []
    with connect(
        f"{srv.ws_url}/api/trials/{trial_id}/logs/ws?after={after}",
        origin=Origin(srv.url),
        additional_headers={"Cookie": f"{SESSION_COOKIE}={srv.session_cookie()}"},
        open_timeout=10,
    ) as ws:
        deadline = time.monotonic() + timeout
        while not (until and until(msgs)):
            msgs.append(json.loads(ws.recv(timeout=max(0.01, deadline - time.monotonic()))))
    return msgs


def stored_log(srv: ThreadServer, trial_id: int) -> str:
    """The trial's whole log as the server stored it."""
    with session_scope(srv.engine, write=False) as session:
        trial = session.get(Trial, trial_id)
        assert trial is not None
        return log_domain.full_text(session, trial)


def log_text(msgs: list[dict]) -> str:
    return "".join(text for m in msgs if m["type"] == "log" for _, text in m["chunks"])


def trial_output(log: str, pid: int | None = None) -> str:
    """A local trial's own output: its log after the line the runner writes first (which must be there,
    naming `pid` when given); "" while that line is not complete yet."""
    first, newline, rest = log.partition("\n")
    if not newline:
        return ""
    assert first.startswith(f"{STARTED_PREFIX}started pid {'' if pid is None else pid}"), first
    return rest


def real_runner_available() -> bool:
    try:
        import runners.agent  # noqa: F401
    except ImportError:
        return False
    return True


def start_real_runner(srv: ThreadServer, token: str, spool: Path) -> subprocess.Popen:
    """`campaign runner` as its own process (its own session, so tests can kill its whole group)."""
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "CAMPAIGN_RUNNER_TOKEN": token,
        "CAMPAIGN_CANCEL_GRACE_S": str(srv.settings.cancel_grace_s),
    }
    log = open(spool.parent / f"runner-{uuid.uuid4().hex[:6]}.log", "w")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app.cli",
            "runner",
            "--server",
            srv.url,
            "--spool-dir",
            str(spool),
            "--name",
            "test-node",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
