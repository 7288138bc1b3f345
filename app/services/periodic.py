"""The hub's periodic passes (the lost-runner sweep, the notifier, change points, the log indexer): one loop
that runs a pass, logs a failed one and goes on, then waits."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable


async def every(
    pause_s: float,
    one_pass: Callable[[], Awaitable[float | None]],
    log: logging.Logger,
    failed: str,
    *,
    wait_first: bool = False,
) -> None:
    """Run `one_pass` until the task is cancelled, `pause_s` apart, or the seconds a pass returns (an indexer
    that is behind asks for less); first wait when `wait_first`. A failed pass is logged (`failed`, with its
    traceback) on the caller's `log`, and the next pass comes as usual."""
    if wait_first:
        await asyncio.sleep(pause_s)
    while True:
        pause = pause_s
        try:
            asked = await one_pass()
            if asked is not None:
                pause = asked
        except Exception:  # cancelling is not an Exception: it ends the loop
            log.exception(failed)
        await asyncio.sleep(pause)
