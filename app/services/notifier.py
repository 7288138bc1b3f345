"""The hub's notifier: delivers the notification outbox (app/domain/notifications.py) through Apprise.

One task in the hub process (page workers never deliver). Every POLL_S it looks (a read) for what is due and
only then claims it in a write transaction (one message
per destination per COALESCE_S: a burst becomes a digest), sends each message in a thread (Apprise is
blocking), and settles the rows: sent, or retried with backoff. At start, rows a killed server had claimed go
back to pending. Apprise's own log lines can carry destination URLs, so they are captured per send (the
error kept on the row has its URLs cut) and never reach the server's log.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

import apprise
from fastapi import FastAPI

from app.domain import notifications
from app.models import utcnow
from app.services import periodic
from app.state import app_state

log = logging.getLogger(__name__)

POLL_S = 0.5
WAITING_CHECK_S = 60.0
SEND_TIMEOUT_S = 15.0


def send(message: notifications.Message) -> str | None:
    """Send one message; None when every destination took it, else the error Apprise gave."""
    errors: list[str] = []

    def keep(entry: object, _plugin: object = None) -> None:
        level = getattr(entry, "level", logging.INFO)
        if isinstance(level, int) and level >= logging.WARNING:
            errors.append(str(getattr(entry, "message", entry)))

    sender = apprise.Apprise()
    if not sender.add(message.url):
        return "Apprise no longer accepts this URL"
    try:
        ok = sender.notify(
            body=message.body, title=message.title, timeout=SEND_TIMEOUT_S, log_callback=keep, log_level=logging.INFO
        )
    except Exception as exc:  # a plugin's own bug: keep it as the delivery's error, never lose the row
        return f"{type(exc).__name__}: {exc}"
    if ok:
        return None
    return "; ".join(errors) or "the destination refused the message"


def _quiet_apprise() -> None:
    # Apprise logs the URLs it posts to; the board's log must never hold a destination's secrets.
    logger = logging.getLogger("apprise")
    logger.propagate = False
    logger.handlers[:] = [logging.NullHandler()]


async def deliver_once(app: FastAPI, now: datetime | None = None) -> int:
    """One pass: claim, send, settle. Returns how many messages went out (sent or failed)."""
    base = app_state(app).settings.base_url()
    if not await app_state(app).db.read_in_tx(lambda s: notifications.has_due(s, now)):
        return 0
    messages = await app_state(app).db.run_in_tx(lambda s: notifications.claim_due(s, base, now))
    for message in messages:
        error = await asyncio.to_thread(send, message)
        if error is not None:
            log.warning("notification to %s failed: %s", message.redacted, error[:300])
        await app_state(app).db.run_in_tx(notifications.settle, message, error)
    return len(messages)


async def run(app: FastAPI, poll_s: float = POLL_S) -> None:
    _quiet_apprise()
    await app_state(app).db.run_in_tx(lambda s: notifications.requeue_claims(s))
    last_waiting = 0.0
    loop = asyncio.get_running_loop()

    async def one_pass() -> None:
        nonlocal last_waiting
        if loop.time() - last_waiting >= WAITING_CHECK_S:
            last_waiting = loop.time()
            if await app_state(app).db.read_in_tx(notifications.follows_waiting):
                await app_state(app).db.run_in_tx(lambda s: notifications.waiting_verdicts(s, utcnow()))
            await app_state(app).db.run_in_tx(
                lambda s: notifications.requeue_claims(s, older_than_s=notifications.STALE_CLAIM_S),
            )
        await deliver_once(app)

    await periodic.every(poll_s, one_pass, log, "notification delivery pass failed")
