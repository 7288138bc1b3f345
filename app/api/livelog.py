"""The browser's live-log websocket: /api/trials/{id}/logs/ws?after=N.

It needs a session cookie (or an API token) of any role, viewers included, and a same-origin Origin. It sends the
trial's state, the stored chunks after seq N, then live chunks and state changes, always in seq
order without repeats:
    {"type": "state", ...trial fields...}
    {"type": "log", "chunks": [[seq, text], ...]}
A viewer that falls behind is closed with code 4000 (CloseCode.RESYNC): reconnect with the
last seq you have. A socket whose session or API token ends (revoked, logged out, expired, user
disabled: app/services/access.py) is closed with code 4401 (CloseCode.UNAUTHORIZED): log in again.

Costs are per publish, not per viewer: a live frame is encoded once (live.Frame) and sent as it is
to every viewer that is caught up; backlog pages are read and encoded on a worker thread. The socket
is read for as long as it is open, so a viewer that leaves is cleaned up at once, ended trial or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from sqlmodel import Session

from app.db import Database
from app.deps import LogAfter, RowId, socket_operator
from app.domain import logs as log_domain
from app.domain import trial_reads
from app.live import Frame, Subscriber, trace
from app.models import Trial
from app.protocol.messages import CloseCode
from app.services import access
from app.state import app_state

log = logging.getLogger(__name__)
router = APIRouter(tags=["trials"])

BACKLOG_PAGE = 500  # chunks per backlog read (and per message)
BACKLOG_PAGE_BYTES = 1024 * 1024  # ... or this many bytes of text, whichever comes first
PENDING_LIMIT = 2000  # chunks held out of order before the viewer is told to resync
COALESCE_FRAMES = 64  # queued frames a viewer that fell behind sends as one message, at most


def browser_allowed(ws: WebSocket) -> bool:
    """A live session (or an API token) of any role and, from a browser, this server's Origin:
    the socket only reads, so a viewer may follow it."""
    return socket_operator(ws, writes=False) is not None


def _backlog_page(session: Session, trial_id: int, after: int) -> tuple[list[tuple[int, str, bool]], bool]:
    """Stored chunks after `after` (at most a page), and whether more may follow."""
    trial = session.get(Trial, trial_id)
    if trial is None:
        return [], False
    rows = log_domain.read_after(session, trial, after, BACKLOG_PAGE, max_bytes=BACKLOG_PAGE_BYTES)
    more = len(rows) == BACKLOG_PAGE or sum(len(text) for _, text, _ in rows) >= BACKLOG_PAGE_BYTES
    return rows, more


class LogFollower:
    """Sends one viewer the backlog after its seq, then live frames, in seq order without repeats."""

    def __init__(self, ws: WebSocket, sub: Subscriber, after: int, db: Database) -> None:
        self.ws = ws
        self.sub = sub
        self.db = db
        self.last = after
        self.pending: dict[int, str] = {}
        self._gap_checked_at: int | None = None

    def _take(self, chunks: list[tuple[int, str]]) -> list[tuple[int, str]]:
        out = []
        for seq, text in chunks:
            if seq > self.last:
                self.pending[seq] = text
        while self.last + 1 in self.pending:
            self.last += 1
            out.append((self.last, self.pending.pop(self.last)))
        return out

    async def run(self, trial: Trial) -> None:
        await self.ws.send_text(json.dumps({"type": "state", **trial_reads.trial_view(trial)}))
        await self.backlog()
        await self.live()

    async def backlog(self) -> None:
        """Stored chunks after the last seq sent, page by page (read and encoded on a worker thread)."""
        while True:
            rows, more = await self.db.read_in_tx(_backlog_page, self.sub.trial_id, self.last)
            out = []
            for seq, text, marker in rows:
                if marker:  # the seqs before the cap's marker were dropped, not late
                    self.pending = {s: t for s, t in self.pending.items() if s > seq}
                    self.last = seq - 1
                out += self._take([(seq, text)])
            if out:
                await self.ws.send_text(await asyncio.to_thread(Frame("log", out).text))
            if not more:
                return

    async def live(self) -> None:
        while True:
            frames = [await self.sub.next()]
            # A viewer that fell behind (a slow reader, a busy loop) has several frames queued: it sends the
            # log frames among them as one message, so the sends per viewer fall as the load rises.
            frames += self.sub.ready(COALESCE_FRAMES - 1)
            run: list[Frame] = []
            for frame in frames:
                if frame.kind == "log":
                    run.append(frame)
                    continue
                await self._send_log(run)
                run = []
                await self.ws.send_text(frame.text())
            await self._send_log(run)

    def _follows(self, frames: list[Frame]) -> int | None:
        """The last seq of these frames when they continue this viewer's seqs without a gap, else None."""
        last = self.last
        for f in frames:
            if not f.contiguous or f.first != last + 1:
                return None
            last = f.last
        return last

    async def _send_log(self, frames: list[Frame]) -> None:
        if not frames:
            return
        dequeued = time.time_ns() if trace.on else 0
        last = None if self.pending else self._follows(frames)
        if last is not None:
            self.last = last
            await self.ws.send_text(Frame.joined(frames))  # the shared bytes: no per-viewer encoding
            out = [c for f in frames for c in f.chunks] if trace.on else []
        else:
            out = self._take([c for f in frames for c in f.chunks])
            if out:
                await self.ws.send_text(Frame("log", out).text())
            if self.pending and self._gap_checked_at != self.last:
                # A gap: chunks stored but never seen live (the cap dropped them, or a publish raced
                # this viewer's join). The database has them once committed; read after the last seq.
                self._gap_checked_at = self.last
                await self.backlog()
            if len(self.pending) > PENDING_LIMIT:
                raise Resync("too many chunks out of order")
        if trace.on and out:
            sent = time.time_ns()
            for seq, _ in out:
                trace("s_dequeued", self.sub.trial_id, seq, dequeued)
                trace("s_sent", self.sub.trial_id, seq, sent)


class Resync(Exception):
    """Close with CloseCode.RESYNC: the viewer reconnects with ?after=<its last seq>."""


async def _until_disconnect(ws: WebSocket) -> None:
    """Read the viewer's socket (viewers send nothing that matters) until it closes."""
    while (await ws.receive())["type"] != "websocket.disconnect":
        pass


async def _close(ws: WebSocket, code: int, reason: str) -> None:
    # The close frame queues behind what the viewer has not read yet: give a slow reader a few seconds,
    # then drop the connection (the page reconnects with ?after= on any close).
    with contextlib.suppress(Exception):
        await asyncio.wait_for(ws.close(code=code, reason=reason), 5)


@router.websocket("/api/trials/{trial_id}/logs/ws")
async def trial_log_socket(ws: WebSocket, trial_id: RowId, after: LogAfter = -1) -> None:
    if not await asyncio.to_thread(browser_allowed, ws):
        await ws.close(code=CloseCode.LOGIN_REQUIRED, reason="log in first")  # before accept: HTTP 403
        return
    db = app_state(ws).db
    hub = app_state(ws).hub
    sub = hub.subscribe(trial_id)  # before reading the database, so no chunk falls in between
    sender: asyncio.Task | None = None
    reader: asyncio.Task | None = None
    ended = asyncio.Event()  # its session or token ended
    watched = access.watch(ws.app, access.credential(ws), ended.set)
    revoked = asyncio.create_task(ended.wait())
    try:
        trial = await db.read_in_tx(lambda s: s.get(Trial, trial_id))
        if trial is None:
            await ws.close(code=CloseCode.NOT_FOUND, reason="no such trial")
            return
        await ws.accept()
        follower = LogFollower(ws, sub, max(after, -1), db)
        sender = asyncio.create_task(follower.run(trial))
        reader = asyncio.create_task(_until_disconnect(ws))
        sub.on_drop = sender.cancel  # fell behind: stop sending (even mid-send to a stuck viewer)
        if sub.dropped:  # already, by what was in flight when it subscribed
            sender.cancel()
        await asyncio.wait({sender, reader, revoked}, return_when=asyncio.FIRST_COMPLETED)
        if reader.done():
            return  # the viewer left (or the server is shutting down)
        if ended.is_set():
            sender.cancel()
            await _close(ws, CloseCode.UNAUTHORIZED, "your session ended: log in again")
            return
        try:
            await sender
        except asyncio.CancelledError:
            if not sub.dropped:
                raise
            await _close(ws, CloseCode.RESYNC, f"fell behind; reconnect with ?after={follower.last}")
        except Resync as exc:
            await _close(ws, CloseCode.RESYNC, str(exc))
    except (WebSocketDisconnect, RuntimeError):
        pass
    finally:
        access.unwatch(ws.app, watched)
        hub.unsubscribe(sub)
        for task in (sender, reader, revoked):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
