"""A board (real uvicorn, SQLite and PostgreSQL) with a real `campaign runner --executor slurm`
process handing trials to the real SLURM daemons: run next, live log, pending reason, cancel, a
failing job, a runner restart that re-attaches, and a two-node trial routed by its requirements."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from sqlmodel import col, select

from app.db import session_scope
from app.domain.answer import load_campaign_metrics
from app.models import Campaign, Metric, Runner
from app.protocol.metrics import MetricName
from app.security import SESSION_COOKIE
from app.state import app_state
from tests.support.trials import (
    ROOT,
    ThreadServer,
    log_text,
    make_settings,
    new_runner_token,
    python_recipe,
    run_next,
    seed_campaign,
    stored_log,
    trial,
    viewer_messages,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.usefixtures("slurm_cluster")


class SlurmNode:
    def __init__(self, srv: ThreadServer, token: str, spool: Path) -> None:
        self.srv, self.token, self.spool = srv, token, spool
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "CAMPAIGN_RUNNER_TOKEN": self.token,
            "CAMPAIGN_CANCEL_GRACE_S": str(self.srv.settings.cancel_grace_s),
        }
        log = open(self.spool.parent / f"runner-{uuid.uuid4().hex[:6]}.log", "w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "app.cli",
                "runner",
                "--server",
                self.srv.url,
                "--spool-dir",
                str(self.spool),
                "--name",
                "slurm-node",
                "--executor",
                "slurm",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(lambda: app_state(self.srv.app).hub.online(), timeout=60, what="the SLURM runner to connect")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@pytest.fixture
def board(tmp_path, db_url):
    srv = ThreadServer(make_settings(tmp_path, db_url, runner_lost_after_s=30.0, cancel_grace_s=2.0)).start()
    _, token = new_runner_token(srv.engine, "slurm-node")
    node = SlurmNode(srv, token, tmp_path / "spool")
    try:
        node.start()
        yield srv, node
    finally:
        node.stop()
        srv.stop()
        # Jobs a detached runner left behind (a failed test) are this test's own: stop them.
        for record in (tmp_path / "spool" / "slurm").glob("*.json"):
            subprocess.run(["scancel", json.loads(record.read_text())["job_id"]], check=False)


def test_live_log_through_slurm(board, tmp_path):
    srv, _ = board
    gate = tmp_path / "gate"
    seed_campaign(
        srv.engine,
        "spec",
        [
            {
                "key": "live",
                "title": "Live",
                "recipe": python_recipe(f"""
            import os, time
            print("hello from slurm", flush=True)
            while not os.path.exists({str(gate)!r}): time.sleep(0.05)
            for i in range(200): print(f"line {{i}}", flush=True)
            """),
            },
        ],
    )
    with session_scope(srv.engine, write=False) as session:
        fingerprint = session.exec(select(Runner)).one().fingerprint
    assert fingerprint is not None
    assert fingerprint["slurm"]["partition"] == "debug" and fingerprint["slurm"]["nodes"] == 2
    started = run_next(srv)
    assert started["started"], started
    tid = started["trial_id"]
    # The first line reaches a viewer while the job still runs (it waits for the gate).
    msgs = viewer_messages(srv, tid, until=lambda m: "hello from slurm\n" in log_text(m), timeout=60)
    wait_for(lambda: trial(srv, tid)["state"] == "running", timeout=30, what="the trial to run")
    gate.touch()
    wait_for(lambda: trial(srv, tid)["state"] == "succeeded", timeout=60, what="the trial to succeed")
    expected = "hello from slurm\n" + "".join(f"line {i}\n" for i in range(200))
    assert stored_log(srv, tid) == expected
    assert log_text(msgs).startswith("hello from slurm\n")


def test_a_failing_job_fails_the_trial(board):
    srv, _ = board
    seed_campaign(
        srv.engine,
        "spec",
        [
            {
                "key": "fails",
                "title": "Fails",
                "recipe": python_recipe("import sys; print('no luck', flush=True); sys.exit(4)"),
            }
        ],
    )
    failed = run_next(srv)
    assert failed["started"], failed
    wait_for(lambda: trial(srv, failed["trial_id"])["state"] == "failed", timeout=60, what="the trial to fail")
    assert trial(srv, failed["trial_id"])["exit_code"] == 4
    assert stored_log(srv, failed["trial_id"]) == "no luck\n"


def test_pending_job_shows_queued_with_reason_then_cancel(board):
    srv, _ = board
    seed_campaign(
        srv.engine,
        "spec",
        [
            {
                "key": "later",
                "title": "Later",
                "recipe": python_recipe("print('x')"),
                "requirements": {"sbatch": ["--begin=now+1hour"]},
            }
        ],
    )
    started = run_next(srv)
    tid = started["trial_id"]
    wait_for(lambda: trial(srv, tid)["phase"] == "queued (BeginTime)", timeout=60, what="the queued phase")
    assert trial(srv, tid)["state"] == "dispatched"
    r = httpx.post(f"{srv.url}/api/trials/{tid}/cancel", headers=srv.api_headers())
    assert r.status_code == 200, r.text
    wait_for(lambda: trial(srv, tid)["state"] == "cancelled", timeout=60, what="the trial to be cancelled")


def test_cancel_running_job_from_the_board(board):
    srv, _ = board
    seed_campaign(
        srv.engine,
        "spec",
        [
            {
                "key": "long",
                "title": "Long",
                "recipe": python_recipe("""
        import signal, sys, time
        signal.signal(signal.SIGTERM, lambda s, f: (print("terminated politely", flush=True), sys.exit(0)))
        print("working", flush=True)
        while True: time.sleep(0.1)
        """),
            }
        ],
    )
    tid = run_next(srv)["trial_id"]
    viewer_messages(srv, tid, until=lambda m: "working\n" in log_text(m), timeout=60)
    r = httpx.post(f"{srv.url}/api/trials/{tid}/cancel", headers=srv.api_headers())
    assert r.status_code == 200, r.text
    wait_for(lambda: trial(srv, tid)["state"] == "cancelled", timeout=60, what="the trial to be cancelled")
    wait_for(lambda: "terminated politely" in stored_log(srv, tid), timeout=30, what="the SIGTERM handler's line")


def test_runner_restart_reattaches_to_its_running_job(board, tmp_path):
    srv, node = board
    gate = tmp_path / "gate"
    seed_campaign(
        srv.engine,
        "spec",
        [
            {
                "key": "survivor",
                "title": "Survivor",
                "recipe": python_recipe(f"""
        import os, time
        for i in range(100): print(f"before {{i}}", flush=True)
        while not os.path.exists({str(gate)!r}): time.sleep(0.05)
        for i in range(100): print(f"after {{i}}", flush=True)
        """),
            }
        ],
    )
    tid = run_next(srv)["trial_id"]
    viewer_messages(srv, tid, until=lambda m: "before 99\n" in log_text(m), timeout=60)
    node.stop()  # SIGTERM: the runner detaches; the job keeps running
    job_id = json.loads(next((tmp_path / "spool" / "slurm").glob("*.json")).read_text())["job_id"]
    jobs = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True).stdout.split()
    assert jobs == ["RUNNING"]
    gate.touch()
    node.start()
    wait_for(lambda: trial(srv, tid)["state"] == "succeeded", timeout=90, what="the re-attached trial to succeed")
    expected = "".join(f"before {i}\n" for i in range(100)) + "".join(f"after {i}\n" for i in range(100))
    assert stored_log(srv, tid) == expected


def test_two_node_trial_is_routed_to_the_slurm_runner(board):
    """2 nodes x 2 ranks through the real runner: the board stores the world's figures and each node's
    and the leaders', tagged; the trial page tells them apart; the model and the charts read the world's."""
    srv, _ = board
    seed_campaign(
        srv.engine,
        "spec",
        [
            {
                "key": "two-nodes",
                "title": "Two nodes",
                "requirements": {"nodes": 2, "tasks_per_node": 2},
                "recipe": {
                    "kind": "allreduce",
                    "timeout_s": 240,
                    "params": {
                        "backend": "gloo",
                        "tokens": [1],
                        "hidden_size": 128,
                        "dtype": "fp32",
                        "iters": 3,
                        "warmup": 1,
                        "calls": 5,
                        "per_call_iters": 0,
                    },
                },
            }
        ],
    )
    started = run_next(srv)
    assert started["started"], started
    tid = started["trial_id"]
    wait_for(lambda: trial(srv, tid)["state"] in ("succeeded", "failed"), timeout=180, what="the trial to end")
    text = stored_log(srv, tid)
    assert trial(srv, tid)["state"] == "succeeded", text[-3000:]
    assert "2 nodes x 2 ranks (nodes from the launcher: n1: ranks [0, 1], n2: ranks [2, 3])" in text

    with session_scope(srv.engine, write=False) as session:
        stored = list(
            session.exec(select(Metric).where(Metric.trial_id == tid).order_by(col(Metric.seq), col(Metric.index)))
        )
        campaign = session.exec(select(Campaign).where(Campaign.slug == "spec")).one()
        model_rows = load_campaign_metrics(session, campaign).newest(MetricName.ALLREDUCE_LATENCY_US)
    latency = [m for m in stored if m.name == MetricName.ALLREDUCE_LATENCY_US]
    # One per node, the world, and the leaders (one rank per node).
    assert sorted((m.tags["scope"], m.tags.get("node_name")) for m in latency) == [
        ("cross-node", None),
        ("node", "n1"),
        ("node", "n2"),
        ("world", None),
    ]
    for m in latency:
        assert m.tags["nodes"] == 2 and m.tags["ranks_per_node"] == 2 and m.tags["world_size"] == 4
        assert m.tags["method"] == "nccl-tests" and m.tags["backend"] == "gloo" and m.value > 0
        assert m.tags["ranks"] == {"world": 4, "node": 2, "cross-node": 2}[m.tags["scope"]]
    assert {m.tags["node"] for m in latency if m.tags["scope"] == "node"} == {0, 1}
    for name in (MetricName.ALLREDUCE_ALGBW_GBPS, MetricName.ALLREDUCE_BUSBW_GBPS):
        assert sorted(m.tags["scope"] for m in stored if m.name == name) == ["cross-node", "node", "node", "world"]
    checks = [m for m in stored if m.name == MetricName.ALLREDUCE_CHECK_PASSED]
    assert [(m.value, m.tags["scope"]) for m in checks] == [(1.0, "world")]

    # The profitability model and the charts read the world's figure only.
    assert [(m.trial_id, m.tags["scope"]) for m in model_rows] == [(tid, "world")]

    # The trial page's metrics table has the columns that tell the rows apart.
    page = httpx.get(
        f"{srv.url}/trials/{tid}/metrics",
        headers={"Cookie": f"{SESSION_COOKIE}={srv.session_cookie()}", "HX-Request": "true"},
        timeout=10,
    )
    assert page.status_code == 200
    for column in ("scope", "node", "node_name", "nodes", "ranks_per_node"):
        assert f"<th>{column}</th>" in page.text
    assert "<td>cross-node</td>" in page.text and "<td>n2</td>" in page.text
