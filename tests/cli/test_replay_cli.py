"""`campaign replay start SLUG --runner ID`, `campaign replay list SLUG`, `campaign replay show SLUG ID`, on
SQLite and PostgreSQL (the command in a subprocess on the test's database), with clear errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sqlmodel import col, select

from app.db import session_scope
from app.models import Replay, Trial, TrialState
from tests.support.replay import build
from tests.support.verdicts import NEW_TORCH, OLD_STACK, runner

ROOT = Path(__file__).resolve().parents[2]


def _cli(db_url: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CAMPAIGN_DATABASE_URL": db_url, "CAMPAIGN_DATA_DIR": str(tmp_path / "data")}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "replay", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_replay_start_list_show(engine, db_url, tmp_path):
    build(engine)
    with session_scope(engine) as s:
        node_b = runner(s, "node-b", NEW_TORCH).id
        same = runner(s, "node-same", {**OLD_STACK, "hostname": "node-same"}).id
    r = _cli(db_url, tmp_path, "list", "c")
    assert r.returncode == 0, r.stderr
    assert "no replays in c" in r.stdout
    r = _cli(db_url, tmp_path, "start", "c", "--runner", str(node_b))
    assert r.returncode == 0, r.stderr
    with session_scope(engine, write=False) as s:
        (row,) = s.exec(select(Replay)).all()
        queued = s.exec(select(Trial).where(Trial.replay_id == row.id).order_by(col(Trial.id))).all()
    assert row.id is not None and row.requested_by == "cli" and row.runner_id == node_b
    assert len(queued) == 3 and all(t.state == TrialState.queued and t.pinned_runner_id == node_b for t in queued)
    assert f"replay #{row.id} on node-b" in r.stdout and "running, 0 of 3 trials ended" in r.stdout
    rows = [line.split("│")[1].strip() for line in r.stdout.splitlines() if line.startswith("│ ")]
    assert [k for k in rows if k] == ["fast", "slow", "measured"]  # payoff order
    r = _cli(db_url, tmp_path, "list", "c")
    assert r.returncode == 0, r.stderr
    assert f"#{row.id}  running" in r.stdout and "node-b  0/3 trials ended  by cli" in r.stdout
    r = _cli(db_url, tmp_path, "show", "c", str(row.id))
    assert r.returncode == 0, r.stderr
    assert f"replay #{row.id} on node-b" in r.stdout and f"#{queued[0].id} queued" in r.stdout
    assert "promising on 8 GPUs" in r.stdout and "no verdict yet" in r.stdout
    # Errors: nothing differs, no such replay, no such campaign.
    r = _cli(db_url, tmp_path, "start", "c", "--runner", str(same))
    assert r.returncode == 1 and "nothing to replay on node-same" in r.stderr
    r = _cli(db_url, tmp_path, "show", "c", str(row.id + 1))
    assert r.returncode == 1 and f"No replay #{row.id + 1}" in r.stderr
    r = _cli(db_url, tmp_path, "list", "nope")
    assert r.returncode == 1 and "error:" in r.stderr
