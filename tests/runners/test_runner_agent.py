"""The runner agent against a small fake board: a real websocket server on 127.0.0.1 that speaks
app/protocol/messages.py, stores chunks idempotently on (attempt, seq) and acks them, like the real one.
Trials are real processes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections import defaultdict
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from pathlib import Path
from typing import Any

import psutil
import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from app.protocol.messages import (
    Ack,
    Cancel,
    Dispatch,
    Finished,
    FinishedAck,
    Heartbeat,
    Hello,
    LogChunkMsg,
    Phase,
    Reject,
    Started,
    Welcome,
    parse_runner_message,
)
from runners.agent import EXIT_TOKEN_REFUSED, Agent, RunnerOptions, backoff_delays, ws_url
from runners.fingerprint import FINGERPRINT_KEYS
from runners.process import ATTEMPT_ENV
from runners.spool import Spool
from tests.support.trials import trial_output
from tests.support.waiting import nothing_arrives, until

PY = sys.executable
TOKEN = "runner-token-1"
FINGERPRINT = {key: None for key in FINGERPRINT_KEYS}


def _recipe(code: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "command", "params": {"argv": [PY, "-c", textwrap.dedent(code)]}, **extra}


class FakeBoard:
    """The server side of the protocol, with hooks to misbehave."""

    def __init__(self, heartbeat_s: float = 5.0) -> None:
        self.heartbeat_s = heartbeat_s
        self.handshakes = 0  # websocket handshakes asked for, refused or not
        self.stored: dict[str, dict[int, LogChunkMsg]] = defaultdict(dict)
        self.hellos: list[Hello] = []
        self.welcomes: list[Welcome] = []
        self.messages: list[tuple[int, Any]] = []  # (connection number, message)
        self.finished: dict[str, Finished] = {}
        self.connections = 0
        self.ws: ServerConnection | None = None
        # Hook: return False to neither store nor ack the message; may also drop the connection.
        self.on_message: Callable[[ServerConnection, int, Any], Awaitable[bool]] | None = None
        self.welcome_cancel: list[str] = []
        self.port = 0

    def last_stored(self, attempt_id: str) -> int:
        seq = -1
        while seq + 1 in self.stored[attempt_id]:
            seq += 1
        return seq

    def text(self, attempt_id: str) -> str:
        """The trial's own output as stored (after the runner's first line)."""
        return trial_output(self.log(attempt_id))

    def log(self, attempt_id: str) -> str:
        chunks = self.stored[attempt_id]
        return "".join(chunks[seq].data for seq in sorted(chunks))

    def of_type(self, kind: type, connection: int | None = None) -> list[Any]:
        return [m for n, m in self.messages if isinstance(m, kind) and connection in (None, n)]

    def process_request(self, connection: ServerConnection, request: Any) -> Any:
        self.handshakes += 1
        if request.path != "/api/runners/ws":
            return connection.respond(HTTPStatus.NOT_FOUND, "not here\n")
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return connection.respond(HTTPStatus.UNAUTHORIZED, "bad runner token\n")
        return None

    async def handler(self, ws: ServerConnection) -> None:
        hello = parse_runner_message(await ws.recv())
        assert isinstance(hello, Hello)
        self.hellos.append(hello)
        welcome = Welcome(
            runner_id=1,
            heartbeat_s=self.heartbeat_s,
            acked={a.attempt_id: self.last_stored(a.attempt_id) for a in hello.attempts},
            cancel=self.welcome_cancel,
        )
        self.welcomes.append(welcome)
        await ws.send(welcome.model_dump_json())
        self.ws = ws
        self.connections += 1  # counts connections that got their welcome
        number = self.connections
        with contextlib.suppress(ConnectionClosed):
            await self._serve(ws, number)

    async def _serve(self, ws: ServerConnection, number: int) -> None:
        async for raw in ws:
            message = parse_runner_message(raw)
            self.messages.append((number, message))
            if self.on_message is not None and not await self.on_message(ws, number, message):
                continue
            if isinstance(message, LogChunkMsg):
                self.stored[message.attempt_id].setdefault(message.seq, message)
                await ws.send(
                    Ack(
                        trial_id=message.trial_id,
                        attempt_id=message.attempt_id,
                        seq=self.last_stored(message.attempt_id),
                    ).model_dump_json()
                )
            elif isinstance(message, Finished):
                self.finished[message.attempt_id] = message
                await ws.send(FinishedAck(trial_id=message.trial_id, attempt_id=message.attempt_id).model_dump_json())

    async def send(self, message: Any) -> None:
        assert self.ws is not None, "no runner connected"
        await self.ws.send(message.model_dump_json())


def scenario(
    board: FakeBoard,
    spool_dir: Path,
    body: Callable[[FakeBoard, Agent], Awaitable[None]],
    *,
    token: str = TOKEN,
    fingerprint: dict[str, Any] | None = FINGERPRINT,
    grace_s: float = 1.0,
    timeout: float = 40.0,
    **serve_options: Any,
) -> int:
    """Run the fake board and an agent, then `body`; stop the agent and return its exit code."""

    async def main() -> int:
        where = {"sock": serve_options.pop("sock")} if "sock" in serve_options else {"host": "127.0.0.1", "port": 0}
        async with serve(board.handler, **where, process_request=board.process_request, **serve_options) as server:
            board.port = server.sockets[0].getsockname()[1]
            agent = Agent(
                RunnerOptions(
                    server_url=f"http://127.0.0.1:{board.port}",
                    token=token,
                    spool_dir=spool_dir,
                    labels=["test"],
                    cancel_grace_s=grace_s,
                ),
                fingerprint=fingerprint,
            )
            running = asyncio.create_task(agent.run())
            try:
                await body(board, agent)
            finally:
                agent.stop()
                code = await asyncio.wait_for(running, 30)
            return code

    return asyncio.run(asyncio.wait_for(main(), timeout))


def _attempt_dirs(spool_dir: Path) -> list[Path]:
    return [p for p in spool_dir.iterdir() if p.is_dir()] if spool_dir.exists() else []


# ---- the log path: in order, exact, once, across a dropped connection --------------------------------

STREAM = """
    import sys, time
    print("@@campaign-phase warming up", flush=True)
    for i in range(40):
        sys.stdout.write(f"line {i:02d} caf\\u00e9 \\u20ac\\n")
        sys.stdout.flush()
        time.sleep(0.03)
    sys.stderr.write("done on stderr\\n")
"""
STREAM_TEXT = (
    "@@campaign-phase warming up\n" + "".join(f"line {i:02d} café €\n" for i in range(40)) + "done on stderr\n"
)


def test_logs_arrive_in_order_and_survive_a_dropped_connection_exactly_once(tmp_path):
    lost: list[int] = []

    async def misbehave(ws: ServerConnection, connection: int, message: Any) -> bool:
        if connection == 1 and isinstance(message, LogChunkMsg) and message.seq >= 3:
            lost.append(message.seq)  # received but never stored nor acked: "lost in flight"
            if message.seq >= 5:
                ws.transport.abort()  # the connection dies mid-stream
            return False
        return True

    async def body(board: FakeBoard, agent: Agent) -> None:
        await until(lambda: board.connections == 1, what="first connection")
        await board.send(Dispatch(trial_id=7, attempt_id="att-7-1", recipe=_recipe(STREAM)))
        await until(lambda: "att-7-1" in board.finished, what="finished")
        await until(lambda: not agent.attempts, what="the attempt to be forgotten after finished_ack")

    board = FakeBoard()
    board.on_message = misbehave
    code = scenario(board, tmp_path / "spool", body, fingerprint=None)
    assert code == 0

    assert board.connections >= 2 and lost and max(lost) >= 5
    # The second hello still holds the attempt; welcome says what was stored; only the rest came again.
    assert [a.attempt_id for a in board.hellos[1].attempts] == ["att-7-1"]
    assert board.welcomes[1].acked == {"att-7-1": 2}
    resent = [m.seq for m in board.of_type(LogChunkMsg, connection=2)]
    assert resent and resent[0] == 3 and resent == sorted(set(resent))

    # Exactly the output, each chunk once, offsets in bytes.
    assert board.text("att-7-1") == STREAM_TEXT
    chunks = [board.stored["att-7-1"][seq] for seq in sorted(board.stored["att-7-1"])]
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    offset = 0
    for chunk in chunks:
        assert chunk.offset == offset
        offset += len(chunk.data.encode())
    assert len(chunks) > 5  # streamed as it was printed, not in one piece at the end

    finished = board.finished["att-7-1"]
    assert (finished.outcome, finished.exit_code, finished.signal, finished.error) == ("exited", 0, None, "")
    assert finished.last_seq == chunks[-1].seq
    assert finished.gpu_released is None and finished.gpu_note == "no GPU on this node"
    started = board.of_type(Started)
    assert len(started) == 1 and started[0].pid > 0
    phases = [m.phase for m in board.of_type(Phase)]
    assert phases[:2] == ["launching", "running"] and "warming up" in phases and phases[-1] == "tearing down"
    # The fingerprint was collected and sent.
    assert set(board.hellos[0].fingerprint) == set(FINGERPRINT_KEYS) and board.hellos[0].labels == ["test"]
    assert _attempt_dirs(tmp_path / "spool") == []


def test_a_refused_token_is_fatal_with_exit_code_3(tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="campaign.runner")
    board = FakeBoard()

    async def main() -> int:
        async with serve(board.handler, "127.0.0.1", 0, process_request=board.process_request) as server:
            port = server.sockets[0].getsockname()[1]
            agent = Agent(
                RunnerOptions(server_url=f"http://127.0.0.1:{port}", token="wrong", spool_dir=tmp_path),
                fingerprint=FINGERPRINT,
            )
            return await asyncio.wait_for(agent.run(), 10)

    assert asyncio.run(main()) == EXIT_TOKEN_REFUSED
    assert board.handshakes == 1  # no retry with a token the board refused
    assert "refused this runner's token (HTTP 401)" in caplog.text
    assert board.connections == 0


def test_a_bad_recipe_fails_to_start_with_the_recipe_error(tmp_path):
    async def body(board: FakeBoard, agent: Agent) -> None:
        await until(lambda: board.connections == 1)
        await board.send(
            Dispatch(trial_id=1, attempt_id="bad", recipe={"kind": "command", "params": {"argv": "ls -l"}})
        )
        await until(lambda: "bad" in board.finished)
        await board.send(
            Dispatch(
                trial_id=2, attempt_id="nothere", recipe={"kind": "command", "params": {"argv": ["/nonexistent/x"]}}
            )
        )
        await until(lambda: {"bad", "nothere"} <= set(board.finished))
        await until(lambda: not agent.attempts)

    board = FakeBoard()
    scenario(board, tmp_path / "spool", body)
    bad = board.finished["bad"]
    assert bad.outcome == "failed_to_start" and "params.argv" in bad.error and bad.last_seq == -1
    missing = board.finished["nothere"]
    assert missing.outcome == "failed_to_start" and "/nonexistent/x" in missing.error
    assert not board.of_type(Started)


def test_cancel_stops_the_trial_and_reports_cancelled(tmp_path):
    async def body(board: FakeBoard, agent: Agent) -> None:
        await until(lambda: board.connections == 1)
        await board.send(
            Dispatch(
                trial_id=3, attempt_id="c1", recipe=_recipe("import time; print('up', flush=True); time.sleep(60)")
            )
        )
        await until(lambda: board.text("c1") == "up\n", what="output")
        await board.send(Cancel(trial_id=3, attempt_id="c1", reason="user clicked cancel"))
        await until(lambda: "c1" in board.finished, what="finished")

    board = FakeBoard()
    scenario(board, tmp_path / "spool", body)
    finished = board.finished["c1"]
    # Stopped in its 60 s sleep by the runner's SIGTERM.
    assert (finished.outcome, finished.signal, finished.exit_code) == ("cancelled", signal.SIGTERM, None)
    # The log closes with the runner's own line saying so and why (issue 32), within Finished's last_seq.
    assert board.text("c1") == "up\n[runner] user clicked cancel; the trial's processes were stopped\n"
    assert max(board.stored["c1"]) == finished.last_seq


def test_reject_kills_the_trial_and_drops_its_spool(tmp_path):
    pid_file = tmp_path / "pid"

    async def body(board: FakeBoard, agent: Agent) -> None:
        await until(lambda: board.connections == 1)
        code = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); print('x', flush=True); time.sleep(60)"
        await board.send(Dispatch(trial_id=4, attempt_id="r1", recipe=_recipe(code)))
        await until(lambda: board.text("r1") == "x\n")
        await board.send(Reject(trial_id=4, attempt_id="r1", reason="stale attempt"))
        pid = int(pid_file.read_text())
        await until(
            lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE,
            what="the rejected trial to be killed",
        )
        await until(lambda: not agent.attempts)
        await nothing_arrives(lambda: board.of_type(Finished), within=0.5, what="a Finished for the rejected attempt")

    board = FakeBoard()
    scenario(board, tmp_path / "spool", body)
    assert "r1" not in board.finished and not board.of_type(Finished)
    assert _attempt_dirs(tmp_path / "spool") == []


def test_heartbeats_name_the_running_attempt(tmp_path):
    async def body(board: FakeBoard, agent: Agent) -> None:
        await until(lambda: board.connections == 1)
        await board.send(Dispatch(trial_id=5, attempt_id="h1", recipe=_recipe("import time; time.sleep(60)")))
        await until(lambda: any(h.attempts for h in board.of_type(Heartbeat)), what="a heartbeat with the attempt")

    board = FakeBoard(heartbeat_s=0.1)
    scenario(board, tmp_path / "spool", body)
    beat = next(h for h in board.of_type(Heartbeat) if h.attempts)
    assert [(a.trial_id, a.attempt_id) for a in beat.attempts] == [(5, "h1")]
    # stopping the runner cancelled the trial and reported it
    assert board.finished["h1"].outcome == "cancelled"


def test_after_a_restart_the_runner_resends_the_spool_and_stops_what_the_old_one_left(tmp_path):
    spool_dir = tmp_path / "spool"
    old = Spool(spool_dir)
    # An attempt that had finished, with chunks 1 and 2 and its finished message not yet acked.
    done = old.open(10, "done")
    for seq, text in enumerate(["a\n", "b\n", "c\n"]):
        done.append(seq * 2, text)
    done.set_finished(Finished(trial_id=10, attempt_id="done", exit_code=0, last_seq=2).model_dump())
    # An attempt that was running when the old runner died: its process is still alive.
    orphan = subprocess.Popen(
        [PY, "-c", "import time; time.sleep(60)"],
        start_new_session=True,
        env=dict(os.environ, **{ATTEMPT_ENV: "orphaned"}),
    )
    running = old.open(11, "orphaned")
    running.append(0, "partial output\n")
    proc = psutil.Process(orphan.pid)
    running.set_leader(proc.pid, proc.create_time())
    old.close()

    board = FakeBoard()
    board.stored["done"][0] = LogChunkMsg(trial_id=10, attempt_id="done", seq=0, offset=0, data="a\n")

    async def body(board: FakeBoard, agent: Agent) -> None:
        await until(lambda: {"done", "orphaned"} <= set(board.finished))
        await until(lambda: not agent.attempts)

    try:
        scenario(board, spool_dir, body)
        assert orphan.wait(timeout=5) is not None
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()
    assert sorted(a.attempt_id for a in board.hellos[0].attempts) == ["done", "orphaned"]
    assert [m.seq for m in board.of_type(LogChunkMsg) if m.attempt_id == "done"] == [1, 2]  # not 0: it was stored
    assert board.log("done") == "a\nb\nc\n" and board.finished["done"].exit_code == 0
    lost = board.finished["orphaned"]
    assert lost.outcome == "cancelled" and "runner restarted" in lost.error and str(orphan.pid) in lost.error
    assert board.log("orphaned") == "partial output\n" and lost.last_seq == 0
    assert _attempt_dirs(spool_dir) == []


# ---- small pieces ------------------------------------------------------------------------------


def test_server_urls_become_the_runner_websocket_url():
    assert ws_url("http://127.0.0.1:8000") == "ws://127.0.0.1:8000/api/runners/ws"
    assert ws_url("https://board.example/prefix/") == "wss://board.example/prefix/api/runners/ws"
    assert ws_url("ws://h:1/api/runners/ws") == "ws://h:1/api/runners/ws"
    with pytest.raises(Exception, match="expected an http"):
        ws_url("board:8000")


def test_backoff_doubles_to_thirty_seconds_with_jitter():
    delays = backoff_delays()
    first = [next(delays) for _ in range(10)]
    assert 0.375 <= first[0] <= 0.625 and 0.75 <= first[1] <= 1.25
    assert all(22.5 <= d <= 37.5 for d in first[7:])
    assert len({round(d, 6) for d in first}) == len(first)


def test_a_board_that_stops_reading_never_stalls_the_trial(tmp_path):
    # The board reads nothing more until the trial has printed everything: if the runner read the
    # pipe only as fast as the socket drains, the child would block on write and never get there.
    done = tmp_path / "done"
    code = f"""
        import os, sys
        for i in range(2500):
            sys.stdout.write(os.urandom(3200).hex() + "\\n")
        sys.stdout.flush()
        open({str(done)!r}, "w").write("ok")
    """
    stalled: list[tuple[int, int]] = []
    agents: list[Agent] = []

    async def hold(ws: ServerConnection, connection: int, message: Any) -> bool:
        if isinstance(message, LogChunkMsg) and not stalled:
            await until(done.exists, timeout=30, what="the trial to finish printing while the board reads nothing")
            attempt = agents[0].attempts["big"]
            await until(lambda: attempt.spool.finished is not None, what="the trial's end")
            stalled.append((attempt.sent_seq, attempt.spool.last_seq))
        return True

    async def body(board: FakeBoard, agent: Agent) -> None:
        agents.append(agent)
        await until(lambda: board.connections == 1)
        await board.send(Dispatch(trial_id=6, attempt_id="big", recipe=_recipe(code)))
        await until(lambda: "big" in board.finished, timeout=60, what="finished")

    board = FakeBoard()
    board.on_message = hold
    # Small, uncompressed socket buffers on the board's side, so a board that stops reading
    # soon stops the runner's sends.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
    sock.bind(("127.0.0.1", 0))
    scenario(board, tmp_path / "spool", body, timeout=90, sock=sock, compression=None, max_queue=4)
    text = board.text("big")
    assert len(text) == 2500 * 6401 and text.count("\n") == 2500
    assert board.finished["big"].exit_code == 0
    sent, spooled = stalled[0]
    assert sent < spooled, "the socket took everything: this test did not exercise a stalled board"


def test_the_embedded_runner_connects_with_the_token_from_env_and_stops_cleanly(tmp_path):
    from runners.embedded import start_embedded, stop_embedded

    async def main() -> tuple[int | None, list[str]]:
        board = FakeBoard()
        async with serve(board.handler, "127.0.0.1", 0, process_request=board.process_request) as server:
            port = server.sockets[0].getsockname()[1]
            runner = start_embedded(f"http://127.0.0.1:{port}", TOKEN, tmp_path / "spool", labels=["local"])
            try:
                argv = psutil.Process(runner.pid).cmdline()
                await until(lambda: board.connections == 1, timeout=60, what="the embedded runner to connect")
            finally:
                code = await asyncio.to_thread(stop_embedded, runner, 20)
            assert board.hellos[0].labels == ["local"]
            assert set(board.hellos[0].fingerprint) == set(FINGERPRINT_KEYS)
            return code, argv

    code, argv = asyncio.run(asyncio.wait_for(main(), 90))
    assert code == 0
    assert TOKEN not in " ".join(argv)  # the token travels in the environment, not on the command line


def test_campaign_runner_exits_3_when_the_token_is_refused(tmp_path):
    async def main() -> subprocess.CompletedProcess[str]:
        board = FakeBoard()
        async with serve(board.handler, "127.0.0.1", 0, process_request=board.process_request) as server:
            port = server.sockets[0].getsockname()[1]
            proc = await asyncio.create_subprocess_exec(
                PY,
                "-m",
                "app.cli",
                "runner",
                "--server",
                f"http://127.0.0.1:{port}",
                "--spool-dir",
                str(tmp_path),
                env=dict(os.environ, CAMPAIGN_RUNNER_TOKEN="not-the-token"),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(proc.communicate(), 60)
            assert proc.returncode is not None  # communicate() waited for it
            return subprocess.CompletedProcess([], proc.returncode, out.decode(), err.decode())

    result = asyncio.run(main())
    assert result.returncode == 3, result.stderr
    assert "refused this runner's token (HTTP 401)" in result.stderr


def test_a_running_attempt_the_welcome_lists_to_cancel_is_stopped_and_reported(tmp_path):
    async def body(board: FakeBoard, agent: Agent) -> None:
        await until(lambda: board.connections == 1)
        await board.send(
            Dispatch(
                trial_id=8, attempt_id="w1", recipe=_recipe("import time; print('up', flush=True); time.sleep(60)")
            )
        )
        await until(lambda: board.text("w1") == "up\n")
        board.welcome_cancel = ["w1"]  # e.g. cancelled on the board while the runner was away
        assert board.ws is not None
        board.ws.transport.abort()
        await until(lambda: "w1" in board.finished, what="finished after the reconnect")

    board = FakeBoard()
    scenario(board, tmp_path / "spool", body)
    assert board.connections == 2 and [a.attempt_id for a in board.hellos[1].attempts] == ["w1"]
    assert board.finished["w1"].outcome == "cancelled"
