"""The page feed: topic -> open streams, per-topic coalescing, and the marks a reconnecting page catches up
from (app/api/pagefeed.py serves it). Beside the vocabulary (app/services/page_events.py), and like it, it knows
nothing of the app's state: app/state.py holds one `PageFeed`."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable

from app.services.page_events import notice

COALESCE_S = 0.2  # at most one notice per topic per this many seconds (a burst's first at once)


class Stream:
    """One open page feed: the topics it follows, the notices not yet written (a set: a burst of the
    same topic is one write), an event that wakes its writer, and why it was closed (`ended`: "shutdown"
    or "credential"; empty while open or when the page left)."""

    __slots__ = ("topics", "pending", "wake", "closed", "ended")

    def __init__(self, topics: Iterable[str]) -> None:
        self.topics = frozenset(topics)
        self.pending: dict[str, str] = {}  # topic -> the encoded notice (the latest one)
        self.wake = asyncio.Event()
        self.closed = False
        self.ended = ""

    def offer(self, topic: str, text: str) -> None:
        self.pending[topic] = text
        self.wake.set()

    def take(self) -> list[str]:
        out = list(self.pending.values())
        self.pending.clear()
        self.wake.clear()
        return out

    def close(self, why: str = "") -> None:
        self.closed = True
        self.ended = self.ended or why
        self.wake.set()


class PageFeed:
    """Topic -> open streams; per-topic coalescing; a sequence number per publish (a notice's id, with
    this process's boot id) so a reconnecting page learns what it missed."""

    def __init__(self, coalesce_s: float = COALESCE_S, windows: dict[str, float] | None = None) -> None:
        self.coalesce_s = coalesce_s
        self.windows = windows or {}  # topic -> its own coalescing window (heartbeats: seconds, not 200 ms)
        self.boot = uuid.uuid4().hex[:12]
        self.seq = 0
        self.last_seq: dict[str, int] = {}  # topic -> seq of its latest publish
        self.streams: dict[str, set[Stream]] = {}
        self._window: dict[str, bool] = {}  # topic -> dirty (published again inside its window)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closing = False
        self.delivered = 0  # notices handed to streams (tests and the bench read it)

    # ---- marks: what a page has seen ----
    def mark(self) -> str:
        """`<boot>.<seq>`: taken before a page reads the database, so any change it cannot see is later."""
        return f"{self.boot}.{self.seq}"

    def missed(self, topics: Iterable[str], since: str | None) -> list[str]:
        """The topics published after `since` (all of them when it is unknown or from another boot)."""
        boot, _, number = (since or "").partition(".")
        if boot != self.boot or not number.isdigit():
            return list(topics)
        seen = int(number)
        return [t for t in topics if self.last_seq.get(t, 0) > seen]

    # ---- streams ----
    def open(self, topics: Iterable[str]) -> Stream:
        stream = Stream(topics)
        if self.closing:
            stream.close("shutdown")
        for topic in stream.topics:
            self.streams.setdefault(topic, set()).add(stream)
        return stream

    def release(self, stream: Stream) -> None:
        stream.closed = True
        for topic in stream.topics:
            subs = self.streams.get(topic)
            if subs is not None:
                subs.discard(stream)
                if not subs:
                    del self.streams[topic]

    def close_all(self) -> None:
        """Shutdown: every open stream ends (uvicorn waits for open responses before it exits)."""
        self.closing = True
        for subs in list(self.streams.values()):
            for stream in list(subs):
                stream.close("shutdown")

    def count(self) -> int:
        return len({s for subs in self.streams.values() for s in subs})

    # ---- publishing (event loop thread) ----
    def publish(self, *topics: str) -> None:
        for topic in topics:
            self.seq += 1
            self.last_seq[topic] = self.seq
            if topic in self._window:
                self._window[topic] = True  # sent at the window's end, once
                continue
            self._deliver(topic)
            self._window[topic] = False
            asyncio.get_running_loop().call_later(self.windows.get(topic, self.coalesce_s), self._window_end, topic)

    def _window_end(self, topic: str) -> None:
        if self._window.pop(topic, False):
            self._deliver(topic)
            self._window[topic] = False
            asyncio.get_running_loop().call_later(self.windows.get(topic, self.coalesce_s), self._window_end, topic)

    def _deliver(self, topic: str) -> None:
        subs = self.streams.get(topic)
        if not subs:
            return
        text = notice(f"{self.boot}.{self.last_seq[topic]}", topic)
        for stream in subs:
            stream.offer(topic, text)
        self.delivered += len(subs)

    def publish_threadsafe(self, *topics: str) -> None:
        """From a worker thread (a sync route's commit): hand the publish to the event loop."""
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self.publish(*topics)
        else:
            loop.call_soon_threadsafe(self.publish, *topics)
