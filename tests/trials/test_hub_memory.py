"""The live hub hands the memory of viewers' backlogs back to the system once the last viewer has left
(glibc keeps freed memory in per-thread arenas; app/live.py LiveHub._release_memory_soon)."""

from __future__ import annotations

import asyncio
import threading

from app import live
from tests.support.waiting import nothing_arrives, until


def test_the_last_viewer_leaving_trims_the_heap_once_and_a_remaining_viewer_defers_it(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(live, "MALLOC_TRIM", lambda: calls.append(threading.current_thread().name))
    monkeypatch.setattr(live, "TRIM_AFTER_S", 0.05)

    async def scenario() -> None:
        hub = live.LiveHub()
        a, b, c = hub.subscribe(1), hub.subscribe(1), hub.subscribe(2)
        hub.unsubscribe(a)
        hub.unsubscribe(c)
        await nothing_arrives(lambda: calls, within=0.2, what="a trim while b still follows trial 1")
        hub.unsubscribe(b)
        hub.unsubscribe(b)  # twice: still one trim
        d = hub.subscribe(3)  # a viewer arrives before the trim is due: nothing
        await nothing_arrives(lambda: calls, within=0.2, what="a trim while d follows trial 3")
        hub.unsubscribe(d)
        await until(lambda: calls, what="the trim once the last viewer left")
        await nothing_arrives(lambda: calls[1:], within=0.1, what="a second trim")
        assert calls[0] != threading.current_thread().name  # on a worker thread, not the event loop

    asyncio.run(scenario())


def test_malloc_trim_is_found_on_glibc():
    # This machine (and CI) run glibc: the trim must not silently be missing there.
    assert live.MALLOC_TRIM is not None
    live.MALLOC_TRIM()
