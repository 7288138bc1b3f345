"""The runner websocket (/api/runners/ws): one connected runner's session.

`Authorization: Bearer <runner token>` at the handshake (refused before accept, HTTP 403, when
unknown or revoked), then `hello` -> `welcome`, then messages both ways (app/protocol/messages.py).
Received messages are processed in batches: whatever is already queued when the previous batch
is done goes into one transaction (app/services/runners.py), and acks are sent after it commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from sqlmodel import Session

from app.deps import bearer_token
from app.domain import runners as runner_domain
from app.live import RunnerLink, trace
from app.models import Runner, utcnow
from app.protocol.messages import CloseCode, Hello, parse_runner_message
from app.services.runners import RunnerIngest
from app.state import app_state

log = logging.getLogger(__name__)
router = APIRouter(tags=["runners"])

BATCH_MAX = 512  # messages per transaction
RECEIVE_QUEUE = 256  # received, not yet processed (beyond this the runner's sends wait: TCP backpressure)


class RunnerSession:
    """One connected runner: reads its socket, hands its messages to RunnerIngest in batches."""

    def __init__(self, ws: WebSocket, runner: Runner) -> None:
        self.ws = ws
        self.runner_id: int = runner.id  # type: ignore[assignment]
        self.name = runner.name
        self.db = app_state(ws).db
        self.hub = app_state(ws).hub
        self.ingest = RunnerIngest(ws.app, self.runner_id, runner.name)
        self.link = RunnerLink(self.runner_id, runner.name, ws.send_text, self._close)
        self.inbox: asyncio.Queue[str | None] = asyncio.Queue(RECEIVE_QUEUE)

    async def _close(self, code: int, reason: str) -> None:
        await self.ws.close(code=code, reason=reason)

    async def run(self) -> None:
        try:
            hello = parse_runner_message(await asyncio.wait_for(self.ws.receive_text(), 30))
        except Exception:
            await self.ws.close(code=CloseCode.BAD_HELLO, reason="expected hello")
            return
        if not isinstance(hello, Hello):
            await self.ws.close(code=CloseCode.BAD_HELLO, reason="expected hello")
            return
        await self.hub.register_runner(self.link)
        try:
            welcome, redispatch = await self.ingest.hello(hello)
            await self.link.send(welcome)
            for message in redispatch:
                await self.link.send(message)
            self.link.ready = True
            await self.ingest.welcomed()
            reader = asyncio.create_task(self._read())
            try:
                await self._process()
            finally:
                reader.cancel()
                with contextlib.suppress(BaseException):
                    await reader
        finally:
            self.link.closed = True
            self.ingest.gone()
            if self.hub.unregister_runner(self.link):
                with contextlib.suppress(Exception):
                    await self.ingest.disconnected(self.link.last_seen)

    async def _read(self) -> None:
        try:
            while True:
                text = await self.ws.receive_text()
                self.link.last_seen = utcnow()
                if trace.on:
                    self.ingest.received_ns.append(time.time_ns())
                await self.inbox.put(text)
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            with contextlib.suppress(asyncio.QueueFull):
                self.inbox.put_nowait(None)
            if self.inbox.full():  # make room for the end marker: the batch is dropped unacked (resent later)
                with contextlib.suppress(asyncio.QueueEmpty):
                    self.inbox.get_nowait()
                self.inbox.put_nowait(None)

    async def _process(self) -> None:
        while True:
            first = await self.inbox.get()
            if first is None:
                return
            batch = [first]
            end = False
            while len(batch) < BATCH_MAX and not self.inbox.empty():
                item = self.inbox.get_nowait()
                if item is None:
                    end = True
                    break
                batch.append(item)
            await self._handle(batch)
            if end:
                return

    async def _handle(self, raw: list[str]) -> None:
        try:
            out = await self.ingest.batch(raw)
        except Exception:
            log.exception("runner %s: a batch of %d messages failed; closing so it resends", self.name, len(raw))
            await self.link.close(CloseCode.SERVER_ERROR, "server error; reconnect and resend")
            raise
        if out.replies:
            await self.link.send_many(out.replies)
        if out.refuse:
            await self.link.close(CloseCode.UNAUTHORIZED, "runner token revoked")


def _authenticate(session: Session, token: str | None) -> Runner | None:
    return runner_domain.authenticate(session, token)


@router.websocket("/api/runners/ws")
async def runner_socket(ws: WebSocket) -> None:
    runner = await app_state(ws).db.read_in_tx(_authenticate, bearer_token(ws))
    if runner is None:
        await ws.close(code=CloseCode.UNAUTHORIZED, reason="unknown or revoked runner token")  # before accept: HTTP 403
        return
    await ws.accept()
    await RunnerSession(ws, runner).run()
