"""The in-process hub: log chunks and trial state fanned out to browser subscribers, and the
registry of connected runner sockets (to push Dispatch and Cancel).

Ingest never waits on a browser: publishing only appends to each subscriber's queue, which is
bounded in bytes. A subscriber that falls behind is dropped: its queue is cleared, its sender
is cancelled and its socket closed with RESYNC_CLOSE_CODE, so it reconnects with the last seq it
has and reads the rest from the database.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from app.models import utcnow
from runners.trace import Trace

log = logging.getLogger(__name__)

trace = Trace("server")


async def trace_probes(period_s: float = 0.005) -> None:
    """While tracing: event-loop stalls ("loop_lag", seq = lateness in microseconds, past 5 ms) and
    garbage collections ("gc", trial = generation, seq = duration in microseconds)."""
    import gc

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

RESYNC_CLOSE_CODE = 4000          # "you fell behind: reconnect with ?after=<last seq you have>"
SUBSCRIBER_QUEUE_BYTES = 4 * 1024 * 1024


@dataclass(eq=False)
class Subscriber:
    trial_id: int
    limit_bytes: int = SUBSCRIBER_QUEUE_BYTES
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    queued_bytes: int = 0
    dropped: asyncio.Event = field(default_factory=asyncio.Event)

    def offer(self, kind: str, payload: Any, size: int) -> bool:
        if self.dropped.is_set():
            return False
        if self.queued_bytes + size > self.limit_bytes:
            self.drop()
            return False
        self.queued_bytes += size
        self.queue.put_nowait((kind, payload, size))
        return True

    def drop(self) -> None:
        # Free what it holds now; its handler sees `dropped` and closes the socket.
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queued_bytes = 0
        self.dropped.set()

    async def next(self) -> tuple[str, Any]:
        kind, payload, size = await self.queue.get()
        self.queued_bytes -= size
        return kind, payload


class RunnerLink:
    """One connected runner socket: serialized sends, last time it was heard from."""

    def __init__(self, runner_id: int, name: str, send_text: Callable[[str], Awaitable[None]],
                 close: Callable[[int, str], Awaitable[None]]) -> None:
        self.runner_id = runner_id
        self.name = name
        self._send_text = send_text
        self._close = close
        self._lock = asyncio.Lock()
        self.last_seen: datetime = utcnow()
        self.ready = False   # welcome sent: may be given work
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
        self.current: dict[int, tuple[str, int]] = {}   # trial id -> (attempt id, runner id)
        self._shared = 0
        self._exclusive = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def may_publish(self, trial_id: int, attempt_id: str, runner_id: int) -> bool:
        return not self._exclusive and self.current.get(trial_id) == (attempt_id, runner_id)

    def share(self) -> "_Share":
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
    async def exclusive(self):  # noqa: ANN201
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


class LiveHub:
    def __init__(self) -> None:
        self.subscribers: dict[int, set[Subscriber]] = {}
        self.runners: dict[int, RunnerLink] = {}
        self.attempts = AttemptGate()

    # ---- browsers ----
    def subscribe(self, trial_id: int, limit_bytes: int = SUBSCRIBER_QUEUE_BYTES) -> Subscriber:
        sub = Subscriber(trial_id, limit_bytes)
        self.subscribers.setdefault(trial_id, set()).add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        subs = self.subscribers.get(sub.trial_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self.subscribers[sub.trial_id]

    def publish_chunks(self, trial_id: int, chunks: list[tuple[int, str]]) -> None:
        """New log chunks [(seq, text)] of the trial's current attempt; never blocks."""
        subs = self.subscribers.get(trial_id)
        if not subs or not chunks:
            return
        size = sum(len(text) for _, text in chunks) + 16 * len(chunks)
        for sub in list(subs):
            sub.offer("log", chunks, size)

    def publish_state(self, trial_id: int, view: dict[str, Any]) -> None:
        for sub in list(self.subscribers.get(trial_id, ())):
            sub.offer("state", view, 512)

    # ---- runners ----
    async def register_runner(self, link: RunnerLink) -> None:
        old = self.runners.get(link.runner_id)
        self.runners[link.runner_id] = link
        if old is not None and old is not link:
            await old.close(4409, "replaced by a newer connection of the same runner")

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


def get_hub(app: Any) -> LiveHub:
    return app.state.live_hub


def ensure_hub(app: Any) -> LiveHub:
    """The app's hub, created by whichever module installs first."""
    hub = getattr(app.state, "live_hub", None)
    if hub is None:
        hub = app.state.live_hub = LiveHub()
    return hub


async def run_in_tx(engine: Any, fn: Callable[..., Any], *args: Any, write: bool = True) -> Any:
    """Run `fn(session, *args)` in one transaction on a worker thread (the event loop never waits on
    the database lock), committing on success. Async routes use this, then push over sockets."""
    from app.db import session_scope

    def work() -> Any:
        with session_scope(engine, write=write) as session:
            return fn(session, *args)

    return await asyncio.to_thread(work)
