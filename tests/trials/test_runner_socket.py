"""The runner websocket against a real uvicorn server, with a runner stand-in speaking the protocol."""

from __future__ import annotations

import socket

import httpx
import pytest
from sqlmodel import col, select
from websockets.exceptions import ConnectionClosed, InvalidStatus

from app.db import session_scope
from app.models import Approach, Metric, StatusChange
from app.protocol.messages import AttemptRef, Finished
from app.protocol.metrics import format_metric
from tests.support.trials import (
    ProtocolRunner,
    command_recipe,
    log_text,
    new_runner_token,
    run_next,
    seed_campaign,
    stored_log,
    trial,
    viewer_messages,
)
from tests.support.waiting import wait_for


def _seed(srv, **extra) -> None:
    seed_campaign(
        srv.engine,
        "spec",
        [
            {"key": "mscclpp", "title": "MSCCL++", "recipe": command_recipe("true"), "requirements": {"gpus": 16}},
            {
                "key": "echo",
                "title": "Echo",
                "recipe": command_recipe("echo", "hi"),
                "requirements": {"gpus": 1},
                **extra,
            },
        ],
    )


def test_bad_and_revoked_tokens_are_refused_and_revoking_disconnects(server):
    _seed(server)
    with pytest.raises(InvalidStatus) as exc:
        ProtocolRunner(server.ws_url, "cbr_not-a-token")
    assert exc.value.response.status_code == 403
    runner_id, token = new_runner_token(server.engine)
    runner = ProtocolRunner(server.ws_url, token)
    r = httpx.post(f"{server.url}/api/runners/{runner_id}/revoke", headers=server.api_headers())
    assert r.status_code == 200, r.text
    with pytest.raises(ConnectionClosed):
        runner.recv(timeout=5)
    with pytest.raises(InvalidStatus):
        ProtocolRunner(server.ws_url, token)
    listed = httpx.get(f"{server.url}/api/runners", headers=server.api_headers()).json()
    assert [r["status"] for r in listed] == ["revoked"]


def test_dispatch_logs_finish_and_approach_status(server):
    _seed(server)
    assert run_next(server)["reason"] == "no runner is connected"
    _, token = new_runner_token(server.engine)
    runner = ProtocolRunner(server.ws_url, token)
    started = run_next(server)
    assert started["started"] and started["approach"] == "echo", started  # MSCCL++ needs 16 GPUs: skipped
    d = runner.expect("dispatch")
    assert d.trial_id == started["trial_id"] and d.recipe["params"]["argv"] == ["echo", "hi"]
    assert run_next(server)["reason"] == "every runner is busy (and next is MSCCL++: needs 16 GPUs, no runner has them)"
    runner.started(d)
    lines = [f"line {i}\n" for i in range(5)]
    metric = format_metric("tok_s", 81.9, "tok/s") + "\n"
    # The metric line is cut in two across chunks 3 and 4.
    chunks = [lines[0], lines[1], lines[2] + metric[:10], metric[10:] + lines[3], lines[4]]
    offset = 0
    for seq, data in enumerate(chunks):
        runner.log(d, seq, offset, data)
        offset += len(data.encode())
    assert sorted(runner.acks(5)) == [0, 1, 2, 3, 4]
    runner.log(d, 2, len(chunks[0]) + len(chunks[1]), chunks[2])  # a resend: acked, stored once
    assert runner.acks(1) == [2]
    runner.finished(d, exit_code=0, last_seq=4)
    runner.expect("finished_ack")
    view = trial(server, d.trial_id)
    assert view["state"] == "succeeded" and view["exit_code"] == 0
    assert stored_log(server, d.trial_id) == "".join(chunks)
    with session_scope(server.engine, write=False) as session:
        metrics = session.exec(select(Metric).where(Metric.trial_id == d.trial_id)).all()
        assert [(m.name, m.value, m.seq) for m in metrics] == [("tok_s", 81.9, 3)]
        echo = session.exec(select(Approach).where(Approach.key == "echo")).one()
        assert echo.status == "untested"
        moves = [
            (c.kind, c.from_status, c.to_status)
            for c in session.exec(
                select(StatusChange).where(StatusChange.approach_id == echo.id).order_by(col(StatusChange.id))
            )
        ]
        # The trial's events (queued, started, ended) are history, never a status change: a trial proposes, a
        # person decides (issue 43 item 1).
        assert moves == [("trial", "untested", "untested")] * 2  # dispatched, then ended
    # The viewer reads the whole log back from the database.
    msgs = viewer_messages(server, d.trial_id, until=lambda m: log_text(m) == "".join(chunks))
    assert msgs[0]["type"] == "state" and msgs[0]["state"] == "succeeded"
    runner.close()


def test_stale_attempt_is_rejected_and_out_of_order_chunks_read_in_order(server):
    _seed(server)
    _, token = new_runner_token(server.engine)
    runner = ProtocolRunner(server.ws_url, token)
    assert run_next(server)
    d = runner.expect("dispatch")
    runner.started(d)
    stale = d.model_copy(update={"attempt_id": "0" * 32})
    runner.log(stale, 0, 0, "from a stale attempt\n")
    assert runner.expect("reject").attempt_id == "0" * 32
    runner.log(d, 1, 2, "b\n")
    runner.log(d, 0, 0, "a\n")
    runner.log(d, 1, 2, "b\n")
    assert sorted(runner.acks(3)) == [0, 1, 1]
    assert stored_log(server, d.trial_id) == "a\nb\n"
    runner.finished(stale, exit_code=1)
    assert runner.expect("reject").attempt_id == "0" * 32
    assert trial(server, d.trial_id)["state"] == "running"


def test_cut_mid_stream_then_resend_leaves_the_log_exact(server):
    _seed(server)
    _, token = new_runner_token(server.engine)
    runner = ProtocolRunner(server.ws_url, token)
    assert run_next(server)
    d = runner.expect("dispatch")
    runner.started(d)
    lines = [f"{i:05d}\n" for i in range(200)]
    for seq in range(100):
        runner.log(d, seq, seq * 6, lines[seq])
    runner.ws.socket.shutdown(socket.SHUT_RDWR)  # cut (no close handshake): some may not have been stored
    runner.ws.socket.close()
    again = ProtocolRunner(server.ws_url, token, attempts=[AttemptRef(trial_id=d.trial_id, attempt_id=d.attempt_id)])
    acked = again.welcome.acked[d.attempt_id]
    assert -1 <= acked <= 99
    for seq in range(max(0, acked - 5), 200):  # resend from a little before what was acked
        again.log(d, seq, seq * 6, lines[seq])
    again.finished(d, 0, last_seq=199)
    again.expect("finished_ack")
    assert stored_log(server, d.trial_id) == "".join(lines)
    assert trial(server, d.trial_id)["state"] == "succeeded"


def test_cancel_is_pushed_and_the_runner_reports_cancelled(server):
    _seed(server)
    _, token = new_runner_token(server.engine)
    runner = ProtocolRunner(server.ws_url, token)
    assert run_next(server)
    d = runner.expect("dispatch")
    runner.started(d)
    r = httpx.post(f"{server.url}/api/trials/{d.trial_id}/cancel", headers=server.api_headers())
    assert r.status_code == 200 and r.json()["cancel_requested"]
    c = runner.expect("cancel")
    assert c.attempt_id == d.attempt_id
    runner.send(Finished(trial_id=d.trial_id, attempt_id=d.attempt_id, signal=15, outcome="cancelled"))
    runner.expect("finished_ack")
    assert trial(server, d.trial_id)["state"] == "cancelled"


def test_a_disconnected_runner_loses_its_trial(server):
    _seed(server)
    _, token = new_runner_token(server.engine)
    runner = ProtocolRunner(server.ws_url, token)
    assert run_next(server)
    d = runner.expect("dispatch")
    runner.started(d)
    runner.close()
    wait_for(lambda: trial(server, d.trial_id)["state"] == "lost", timeout=15, what="trial lost")
    # A reconnecting runner that still holds the attempt is told to stop it.
    again = ProtocolRunner(server.ws_url, token, attempts=[AttemptRef(trial_id=d.trial_id, attempt_id=d.attempt_id)])
    assert again.welcome.cancel == [d.attempt_id]
    again.log(d, 0, 0, "late\n")
    assert again.expect("reject").trial_id == d.trial_id


def test_download_and_viewer_after_seq(server):
    _seed(server)
    _, token = new_runner_token(server.engine)
    runner = ProtocolRunner(server.ws_url, token)
    assert run_next(server)
    d = runner.expect("dispatch")
    runner.started(d)
    for seq in range(10):
        runner.log(d, seq, seq * 2, f"{seq}\n")
    runner.acks(10)
    msgs = viewer_messages(server, d.trial_id, after=6, until=lambda m: log_text(m) == "7\n8\n9\n")
    assert [c[0] for m in msgs if m["type"] == "log" for c in m["chunks"]] == [7, 8, 9]
    r = httpx.get(f"{server.url}/api/trials/{d.trial_id}/log", headers=server.api_headers())
    assert r.status_code == 200 and r.text == "".join(f"{i}\n" for i in range(10))
    assert r.headers["content-type"].startswith("text/plain") and "attachment" in r.headers["content-disposition"]
