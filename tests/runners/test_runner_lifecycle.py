"""One cleanup path for every way a trial ends: the runner flushes the trial's log to the board, uploads its
artifacts, then reports the end, last and exactly once (buildkite/agent's run_job.go) — after a normal
end, a timeout, a cancel, a program that does not start, and a runner bug.

The board is a small fake over real HTTP and a real websocket (uvicorn + Starlette, in the test's loop):
it speaks app/protocol/messages.py, acks each log chunk a moment after it arrives (so a runner that did not wait
for its log to be stored would upload or finish first), takes the resumable uploads of runners/artifacts.py,
and writes down, in order, each chunk it acked, each artifact it completed and each Finished."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from app.protocol.messages import (
    Ack,
    Cancel,
    Dispatch,
    Finished,
    FinishedAck,
    Hello,
    LogChunkMsg,
    Welcome,
    parse_runner_message,
)
from runners import artifacts
from runners.agent import Agent, RunnerOptions
from runners.executors import LocalExecutor
from runners.fingerprint import FINGERPRINT_KEYS
from tests.support.net import free_port

TOKEN = "lifecycle-token"
ACK_DELAY_S = 0.3  # the board stores a chunk at once and acks it this much later
WRITE_ARTIFACT = f"""
    import os, pathlib, sys, time
    pathlib.Path(os.environ[{artifacts.ARTIFACTS_ENV!r}], "result.txt").write_text("measured")
    for i in range(5):
        print(f"line {{i}}", flush=True)
"""


class LifecycleBoard:
    """The board's side of one runner: its websocket and its upload routes, with an ordered record."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []  # ("log", seq) when acked, ("artifact", name), ("finished", outcome)
        self.stored: dict[int, str] = {}
        self.files: dict[str, bytes] = {}
        self.ws: WebSocket | None = None
        self.outbox: asyncio.Queue[tuple[float, Ack | FinishedAck]] = asyncio.Queue()
        self.app = Starlette(
            routes=[
                WebSocketRoute("/api/runners/ws", self.runner_socket),
                Route("/api/trials/{trial_id:int}/uploads/{name:path}", self.upload, methods=["GET", "PUT", "DELETE"]),
                Route("/api/trials/{trial_id:int}/artifacts", self.complete, methods=["POST"]),
            ]
        )

    def text(self) -> str:
        return "".join(self.stored[seq] for seq in sorted(self.stored))

    def finished(self) -> list[Any]:
        return [detail for kind, detail in self.events if kind == "finished"]

    async def runner_socket(self, ws: WebSocket) -> None:
        assert ws.headers.get("authorization") == f"Bearer {TOKEN}"
        await ws.accept()
        hello = parse_runner_message(await ws.receive_text())
        assert isinstance(hello, Hello)
        await ws.send_text(Welcome(runner_id=1, heartbeat_s=30, acked={}, cancel=[]).model_dump_json())
        self.ws = ws
        sender = asyncio.create_task(self._send_later(ws))
        try:
            while True:
                message = parse_runner_message(await ws.receive_text())
                if isinstance(message, LogChunkMsg):
                    self.stored.setdefault(message.seq, message.data)
                    ack = Ack(trial_id=message.trial_id, attempt_id=message.attempt_id, seq=message.seq)
                    self.outbox.put_nowait((ACK_DELAY_S, ack))
                elif isinstance(message, Finished):
                    self.events.append(("finished", message))
                    done = FinishedAck(trial_id=message.trial_id, attempt_id=message.attempt_id)
                    self.outbox.put_nowait((0.0, done))
        except WebSocketDisconnect:
            pass
        finally:
            sender.cancel()

    async def _send_later(self, ws: WebSocket) -> None:
        """One sender, in order: each ack a moment after its chunk came (recorded when it is sent)."""
        while True:
            delay, message = await self.outbox.get()
            await asyncio.sleep(delay)
            if isinstance(message, Ack):
                self.events.append(("log", message.seq))
            await ws.send_text(message.model_dump_json())

    async def upload(self, request: Request) -> JSONResponse:
        assert request.headers.get("authorization") == f"Bearer {TOKEN}"
        name = request.path_params["name"]
        if request.method == "DELETE":
            self.files.pop(name, None)
        elif request.method == "PUT":
            self.files[name] = self.files.get(name, b"") + await request.body()
        return JSONResponse({"offset": len(self.files.get(name, b""))})

    async def complete(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.events.append(("artifact", body["name"]))
        return JSONResponse({"name": body["name"], "size": body["size"]})


class FailingExecutor(LocalExecutor):
    """A runner bug after the trial ran: the GPU check raises."""

    def gpus_released(self, before: Any) -> tuple[bool | None, str]:
        raise RuntimeError("the GPU check broke")


async def _until(condition: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def _run(
    tmp_path: Path, body: Callable[[LifecycleBoard, Agent], Awaitable[None]], executor: LocalExecutor | None = None
) -> LifecycleBoard:
    async def main() -> LifecycleBoard:
        board = LifecycleBoard()
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(board.app, host="127.0.0.1", port=port, log_level="warning"))
        serving = asyncio.create_task(server.serve())
        await _until(lambda: server.started, what="the board to listen")
        agent = Agent(
            RunnerOptions(
                server_url=f"http://127.0.0.1:{port}",
                token=TOKEN,
                spool_dir=tmp_path / "spool",
                cancel_grace_s=1.0,
                executor=executor,
            ),
            fingerprint={key: None for key in FINGERPRINT_KEYS},
        )
        running = asyncio.create_task(agent.run())
        try:
            await _until(lambda: board.ws is not None, what="the runner to connect")
            await body(board, agent)
            await _until(lambda: bool(board.finished()) and not agent.attempts, what="the end to be reported and acked")
        finally:
            agent.stop()
            await asyncio.wait_for(running, 30)
            server.should_exit = True
            await serving
        return board

    return asyncio.run(asyncio.wait_for(main(), 60))


def _recipe(code: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "command", "params": {"argv": [sys.executable, "-c", textwrap.dedent(code)]}, **extra}


def _dispatch(recipe: dict[str, Any]) -> Dispatch:
    return Dispatch(trial_id=5, attempt_id="att-5-1", recipe=recipe)


async def _normal_end(board: LifecycleBoard, agent: Agent) -> None:
    await board.ws.send_text(_dispatch(_recipe(WRITE_ARTIFACT)).model_dump_json())  # type: ignore[union-attr]


async def _timeout(board: LifecycleBoard, agent: Agent) -> None:
    code = WRITE_ARTIFACT + "    time.sleep(60)\n"
    await board.ws.send_text(_dispatch(_recipe(code, timeout_s=1)).model_dump_json())  # type: ignore[union-attr]


async def _cancel(board: LifecycleBoard, agent: Agent) -> None:
    code = WRITE_ARTIFACT + "    time.sleep(60)\n"
    await board.ws.send_text(_dispatch(_recipe(code)).model_dump_json())  # type: ignore[union-attr]
    await _until(lambda: "line 4" in board.text(), what="output")
    await board.ws.send_text(Cancel(trial_id=5, attempt_id="att-5-1", reason="stop").model_dump_json())  # type: ignore[union-attr]


async def _spawn_failure(board: LifecycleBoard, agent: Agent) -> None:
    # What an earlier attempt of the trial left in its artifact directory goes up with this end.
    left = artifacts.trial_dir(agent.options.spool_dir, 5)
    left.mkdir(parents=True)
    (left / "result.txt").write_text("left over")
    recipe = {"kind": "command", "params": {"argv": ["/nonexistent/program"]}}
    await board.ws.send_text(_dispatch(recipe).model_dump_json())  # type: ignore[union-attr]


WAYS_OUT = {
    "normal end": (_normal_end, None, ("exited", "")),
    "timeout": (_timeout, None, ("timed_out", "timed out")),
    "cancel": (_cancel, None, ("cancelled", "")),
    "spawn failure": (_spawn_failure, None, ("failed_to_start", "/nonexistent/program")),
    "runner bug": (_normal_end, FailingExecutor, ("exited", "the GPU check broke")),
}


@pytest.mark.parametrize("way", WAYS_OUT, ids=list(WAYS_OUT))
def test_every_way_out_flushes_the_log_uploads_artifacts_then_reports_the_end_once(tmp_path, way):
    body, executor, (outcome, error) = WAYS_OUT[way]
    board = _run(tmp_path, body, executor() if executor else None)

    [finished] = board.finished()  # exactly once
    assert finished.outcome == outcome and error in finished.error, finished
    kinds = [kind for kind, _ in board.events]
    assert kinds[-1] == "finished", board.events  # the end is reported last
    assert ("artifact", "result.txt") in board.events and board.files["result.txt"] in (b"measured", b"left over")
    logs = [i for i, (kind, _) in enumerate(board.events) if kind == "log"]
    artifact = kinds.index("artifact")
    # Every chunk the end counts was stored and acked before the upload began.
    assert all(i < artifact for i in logs), board.events
    assert sorted(seq for kind, seq in board.events if kind == "log")[-1:] == (
        [finished.last_seq] if finished.last_seq >= 0 else []
    )
    if way != "spawn failure":
        assert "line 4" in board.text()
    assert not artifacts.trial_dir(tmp_path / "spool", 5).exists()  # uploaded, then removed
    assert [p.name for p in (tmp_path / "spool").iterdir() if p.is_dir()] == []  # its spool dropped on the ack
