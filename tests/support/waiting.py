"""Waiting in tests: on a condition, with a deadline, never for a fixed time. The one exception is a check that
nothing arrives, which can only wait a bounded time: it says so by its name, `assert_nothing_arrives`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


def wait_for(predicate: Callable[[], Any], timeout: float = 15, interval: float = 0.05, what: str = "condition"):
    """Poll `predicate` until it returns something truthy (returned), or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


async def until(condition: Callable[[], Any], timeout: float = 15.0, interval: float = 0.02, what: str = "condition"):
    """`wait_for` inside an event loop: the loop keeps running between polls."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(interval)
    return value


def assert_nothing_arrives(arrived: Callable[[], Any], within: float, what: str, interval: float = 0.02) -> None:
    """Fail as soon as `arrived()` returns something truthy during the next `within` seconds: the bounded wait of
    a test that checks that something does not happen (a notice, a message, a signal)."""
    deadline = time.monotonic() + within
    while True:
        value = arrived()
        assert not value, f"{what} arrived: {value!r}"
        if time.monotonic() >= deadline:
            return
        time.sleep(interval)


async def nothing_arrives(arrived: Callable[[], Any], within: float, what: str, interval: float = 0.02) -> None:
    """`assert_nothing_arrives` inside an event loop: the loop keeps running while it watches."""
    deadline = time.monotonic() + within
    while True:
        value = arrived()
        assert not value, f"{what} arrived: {value!r}"
        if time.monotonic() >= deadline:
            return
        await asyncio.sleep(interval)
