"""The in-process hub: log chunks and trial state fanned out to browser subscribers, and the
registry of connected runner sockets (to push Dispatch and Cancel).

Ingest never waits on a browser: publishing only appends to each subscriber's queue, which is
bounded in bytes. A subscriber that falls behind is dropped: its queue is cleared, its sender
is cancelled and its socket closed with CloseCode.RESYNC, so it reconnects with the last seq it
has and reads the rest from the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import gc
import json
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from app.models import utcnow
from app.protocol.messages import CloseCode
from app.protocol.trace import Trace

log = logging.getLogger(__name__)

trace = Trace("server")


async def trace_probes(period_s: float = 0.005) -> None:
    """While tracing: event-loop stalls ("loop_lag", seq = lateness in microseconds, past 5 ms) and
    garbage collections ("gc", trial = generation, seq = duration in microseconds)."""
    started: dict[str, int] = {}

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started["t"] = time.perf_counter_ns()
        elif "t" in started:
            trace("gc", info.get("generation", -1), (time.perf_counter_ns() - started.pop("t")) // 1000)

    gc.callbacks.append(on_gc)
    try:
        while True:
            before = time.perf_counter_ns()
            await asyncio.sleep(period_s)
            late = (time.perf_counter_ns() - before) // 1000 - int(period_s * 1e6)
            if late > 5000:
                trace("loop_lag", -1, late)
    finally:
        gc.callbacks.remove(on_gc)


SUBSCRIBER_QUEUE_BYTES = 4 * 1024 * 1024


class Frame:
    """One publish, encoded once for every viewer of the trial: `text()` is the JSON message they all
    send as it is (a viewer re-encodes only when it must skip chunks it already has)."""

    __slots__ = ("kind", "chunks", "payload", "size", "first", "last", "contiguous", "_text")

    def __init__(
        self, kind: str, chunks: list[tuple[int, str]] | None = None, payload: dict[str, Any] | None = None
    ) -> None:
        self.kind = kind
        self.chunks = chunks or []
        self.payload = payload
        self._text: str | None = None
        if self.chunks:
            self.first, self.last = self.chunks[0][0], self.chunks[-1][0]
            self.contiguous = self.last - self.first == len(self.chunks) - 1
            self.size = sum(len(text) for _, text in self.chunks) + 16 * len(self.chunks)
        else:
            self.first = self.last = -1
            self.contiguous = False
            self.size = 512

    LOG_PREFIX = '{"type": "log", "chunks": ['  # what text() of a log frame starts with; it ends with "]}"

    @staticmethod
    def joined(frames: list[Frame]) -> str:
        """One log message holding the chunks of these log frames, in order, from their shared encodings (no
        JSON encoding: slices of text already encoded once for every viewer)."""
        if len(frames) == 1:
            return frames[0].text()
        start = len(Frame.LOG_PREFIX)
        return Frame.LOG_PREFIX + ", ".join(f.text()[start:-2] for f in frames) + "]}"

    def text(self) -> str:
        if self._text is None:
            if self.kind == "log":
                self._text = json.dumps({"type": "log", "chunks": self.chunks})
            else:
                self._text = json.dumps({"type": "state", **(self.payload or {})})
        return self._text


class Subscriber:
    """One viewer's queue of shared frames, bounded in bytes. `drop()` empties it and calls `on_drop`
    (the viewer's handler cancels its sender, closes with CloseCode.RESYNC)."""

    def __init__(self, trial_id: int, limit_bytes: int = SUBSCRIBER_QUEUE_BYTES) -> None:
        self.trial_id = trial_id
        self.limit_bytes = limit_bytes
        self.queue: asyncio.Queue[Frame] = asyncio.Queue()
        self.queued_bytes = 0
        self.dropped = False
        self.on_drop: Callable[[], Any] | None = None

    def offer(self, frame: Frame) -> bool:
        if self.dropped:
            return False
        if self.queued_bytes + frame.size > self.limit_bytes:
            self.drop()
            return False
        self.queued_bytes += frame.size
        self.queue.put_nowait(frame)
        return True

    def drop(self) -> None:
        # Free what it holds now; the handler learns through on_drop.
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queued_bytes = 0
        self.dropped = True
        if self.on_drop is not None:
            self.on_drop()

    async def next(self) -> Frame:
        frame = await self.queue.get()
        self.queued_bytes -= frame.size
        return frame

    def ready(self, limit: int) -> list[Frame]:
        """Up to `limit` frames already queued, without waiting (a viewer that fell behind sends them as one)."""
        out: list[Frame] = []
        while len(out) < limit and not self.queue.empty():
            frame = self.queue.get_nowait()
            self.queued_bytes -= frame.size
            out.append(frame)
        return out


class RunnerLink:
    """One connected runner socket: serialized sends, last time it was heard from."""

    def __init__(
        self,
        runner_id: int,
        name: str,
        send_text: Callable[[str], Awaitable[None]],
        close: Callable[[int, str], Awaitable[None]],
    ) -> None:
        self.runner_id = runner_id
        self.name = name
        self._send_text = send_text
        self._close = close
        self._lock = asyncio.Lock()
        self.last_seen: datetime = utcnow()
        self.ready = False  # welcome sent: may be given work
        self.closed = False

    async def send(self, message: BaseModel | str) -> bool:
        text = message if isinstance(message, str) else message.model_dump_json()
        async with self._lock:
            if self.closed:
                return False
            try:
                await self._send_text(text)
                return True
            except Exception:  # the socket went away; its handler cleans up
                return False

    async def send_many(self, texts: list[str]) -> None:
        async with self._lock:
            for text in texts:
                if self.closed:
                    return
                try:
                    await self._send_text(text)
                except Exception:
                    return

    async def close(self, code: int, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._close(code, reason), 2)


class AttemptGate:
    """Which trials' current attempts are known valid, so their log chunks may be fanned out as soon as
    they are parsed, before the transaction that stores them commits.

    Safe because a chunk's content for (trial, attempt, seq) is fixed (the runner resends the same bytes),
    appends are idempotent and viewers dedupe by seq: the only way a viewer could see something that will
    not be stored is an attempt that turned stale (lost, replaced) between the publish and the commit.
    Only the transactions that can do that (the lost-runner sweep, a runner's hello) run `exclusive()`:
    no chunk is published early meanwhile, they start once every ingest batch in flight has committed,
    and the trials they end are forgotten before early publishing resumes. A trial is remembered only by
    a batch (or a dispatch) whose transaction ran with no exclusive one pending (`share()`).
    """

    def __init__(self) -> None:
        self.current: dict[int, tuple[str, int]] = {}  # trial id -> (attempt id, runner id)
        self._shared = 0
        self._exclusive = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def may_publish(self, trial_id: int, attempt_id: str, runner_id: int) -> bool:
        return not self._exclusive and self.current.get(trial_id) == (attempt_id, runner_id)

    def share(self) -> _Share:
        """Around a transaction that may validate attempts: `with gate.share() as ok: ...; if ok: remember()`."""
        return _Share(self)

    def remember(self, trial_id: int, attempt_id: str, runner_id: int) -> None:
        self.current[trial_id] = (attempt_id, runner_id)

    def forget(self, trial_id: int) -> None:
        self.current.pop(trial_id, None)

    def forget_runner(self, runner_id: int) -> None:
        for trial_id in [t for t, (_, r) in self.current.items() if r == runner_id]:
            del self.current[trial_id]

    @contextlib.asynccontextmanager
    async def exclusive(self):
        self._exclusive += 1
        try:
            await self._idle.wait()
            yield
        finally:
            self._exclusive -= 1


class _Share:
    def __init__(self, gate: AttemptGate) -> None:
        self.gate = gate
        self.counted = False

    def __enter__(self) -> bool:
        """True when no exclusive transaction is pending: what this one validates may be remembered."""
        if self.gate._exclusive:
            return False
        self.counted = True
        self.gate._shared += 1
        self.gate._idle.clear()
        return True

    def __exit__(self, *exc: object) -> None:
        if self.counted:
            self.gate._shared -= 1
            if not self.gate._shared:
                self.gate._idle.set()


def _malloc_trim() -> Callable[[], Any] | None:
    """glibc's malloc_trim(0), where there is one: hands freed heap pages back to the system."""
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None
    return None if trim is None else lambda: trim(0)


MALLOC_TRIM = _malloc_trim()
TRIM_AFTER_S = 1.0


class LiveHub:
    """Subscribers per trial, and the chunks published before their commit ("uncommitted"): a viewer
    that subscribes while such a batch is in flight gets those frames first, because its backlog read
    cannot see them yet and the publish after the commit skips them (they went out already)."""

    def __init__(self) -> None:
        self.subscribers: dict[int, set[Subscriber]] = {}
        self.uncommitted: dict[int, list[Frame]] = {}
        self.runners: dict[int, RunnerLink] = {}
        self.attempts = AttemptGate()
        self._trim: asyncio.TimerHandle | None = None

    # ---- browsers ----
    def subscribe(self, trial_id: int, limit_bytes: int = SUBSCRIBER_QUEUE_BYTES) -> Subscriber:
        sub = Subscriber(trial_id, limit_bytes)
        self.subscribers.setdefault(trial_id, set()).add(sub)
        for frame in self.uncommitted.get(trial_id, ()):
            sub.offer(frame)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        subs = self.subscribers.get(sub.trial_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self.subscribers[sub.trial_id]
        if not self.subscribers:
            self._release_memory_soon()

    def _release_memory_soon(self) -> None:
        """The last viewer left: a second later, give the memory their backlogs used back to the system.
        Python frees it, but glibc keeps it in its per-thread arenas (the backlog pages are read and
        encoded on worker threads), so the server's RSS would stay at its peak (docs/performance.md)."""
        if MALLOC_TRIM is None or self._trim is not None:
            return
        loop = asyncio.get_running_loop()

        def trim() -> None:
            self._trim = None
            if not self.subscribers:
                loop.run_in_executor(None, MALLOC_TRIM)

        self._trim = loop.call_later(TRIM_AFTER_S, trim)

    def publish_chunks(self, trial_id: int, chunks: list[tuple[int, str]], *, committed: bool = True) -> Frame | None:
        """New log chunks [(seq, text)] of the trial's current attempt; never blocks. One frame, shared by
        every viewer. `committed=False` (published early): the caller passes the frame to `settle()`
        once its transaction has ended, committed or not."""
        if not chunks:
            return None
        frame = Frame("log", chunks)
        if not committed:
            self.uncommitted.setdefault(trial_id, []).append(frame)
        for sub in list(self.subscribers.get(trial_id, ())):
            sub.offer(frame)
        return frame

    def settle(self, trial_id: int, frame: Frame) -> None:
        frames = self.uncommitted.get(trial_id)
        if frames is not None:
            with contextlib.suppress(ValueError):
                frames.remove(frame)
            if not frames:
                del self.uncommitted[trial_id]

    def publish_state(self, trial_id: int, view: dict[str, Any]) -> None:
        subs = self.subscribers.get(trial_id)
        if subs:
            frame = Frame("state", payload=view)
            for sub in list(subs):
                sub.offer(frame)

    # ---- runners ----
    async def register_runner(self, link: RunnerLink) -> None:
        old = self.runners.get(link.runner_id)
        self.runners[link.runner_id] = link
        if old is not None and old is not link:
            await old.close(CloseCode.REPLACED, "replaced by a newer connection of the same runner")

    def unregister_runner(self, link: RunnerLink) -> bool:
        """True when this link was the runner's current one."""
        if self.runners.get(link.runner_id) is link:
            del self.runners[link.runner_id]
            return True
        return False

    def online(self) -> set[int]:
        """Runners whose socket this process holds and that have been welcomed."""
        return {rid for rid, link in self.runners.items() if link.ready and not link.closed}

    def last_seen(self) -> dict[int, datetime]:
        return {rid: link.last_seen for rid, link in self.runners.items()}

    async def send_to_runner(self, runner_id: int, message: BaseModel) -> bool:
        link = self.runners.get(runner_id)
        return await link.send(message) if link else False

    async def disconnect_runner(self, runner_id: int, code: int, reason: str) -> None:
        link = self.runners.get(runner_id)
        if link is not None:
            await link.close(code, reason)
