"""Page events: small "X changed" notices pushed to open pages (the page feed's websocket, app/api/pagefeed.py),
published only after the transaction that made the change has committed.

A topic names what changed: `campaign:<id>`, `approach:<id>`, `trial:<id>`, `runners` (a runner's state)
or `heartbeats` (runners' "last seen": only the Runners page follows it, and its window is long). A page
subscribes to the topics it shows; on a notice it re-fetches its fragments with htmx (the same
templates as on load). Log chunks are never page events: only state changes are.

Costs are per publish, not per viewer: a topic's notices are coalesced (the first goes out at once,
the rest of a burst at most once per COALESCE_S, as one notice), each notice is one shared
pre-encoded string (`notice`), and handing it to a viewer only marks that viewer's stream to wake up.

What a page's script must know of the feed (its address, the DOM event a notice fires, the close code
that means "log in again", the retry delay) comes from here, as the feed element's data attributes
(`feed_attributes`), never spelled again in JavaScript.

Every DOM event a page listens for is declared once, in `PAGE_EVENTS` (the page feed's `feed:<kind>`
and the events the board's own scripts and htmx answers fire): templates write their hx-trigger with
`hx_trigger(...)` (a Jinja global) and the scripts read the names from <body data-page-events>
(`page_events_json`), so a renamed event cannot leave a panel listening for nothing.

Where publishes come from: the services, never a route (tests/web/test_page_event_sources.py).
- async services (`trials.py`, `runners.py`, `artifacts.py`, `changes.py`): `publish(app, *topics)` after
  their `Database.run_in_tx` returns;
- the writes routes make on the request session (SessionDep, committed by the dependency) go through
  `campaigns.py`, which calls `after_commit(session, *topics)`: published from SQLAlchemy's after_commit
  hook (nothing on rollback).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from typing import Any

from sqlalchemy import event
from sqlmodel import Session
from starlette.requests import HTTPConnection

from app.domain import inbox as inbox_domain
from app.services.page_events import (  # the vocabulary, re-exported: `events.campaign(id)`, `events.PAGE_EVENTS`
    DOM_EVENT_PREFIX,
    FEED_PATH,
    FORWARDED_MARK,
    HEARTBEATS,
    HTMX_TRIGGERS,
    KINDS,
    MAX_TOPICS,
    PAGE_EVENTS,
    RETRY_MS,
    ROW_KINDS,
    RUNNERS,
    STALE,
    TOPIC,
    PageEvent,
    approach,
    campaign,
    dom_event,
    feed_attributes,
    feed_path,
    hx_trigger,
    inbox,
    kind,
    notice,
    of_trial,
    page_events_json,
    trial,
)
from app.services.page_feed import COALESCE_S, PageFeed, Stream
from app.state import StateOwner, app_state

__all__ = [
    "COALESCE_S",
    "DOM_EVENT_PREFIX",
    "FEED_PATH",
    "FORWARDED_MARK",
    "HEARTBEATS",
    "HTMX_TRIGGERS",
    "KINDS",
    "MAX_TOPICS",
    "PAGE_EVENTS",
    "RETRY_MS",
    "ROW_KINDS",
    "RUNNERS",
    "STALE",
    "TOPIC",
    "PageEvent",
    "PageFeed",
    "Stream",
    "after_commit",
    "approach",
    "campaign",
    "dom_event",
    "feed_attributes",
    "feed_path",
    "hx_trigger",
    "inbox",
    "kind",
    "notice",
    "of_trial",
    "page_events_json",
    "page_mark",
    "publish",
    "start",
    "stop",
    "trial",
]

log = logging.getLogger(__name__)


def page_mark(request: HTTPConnection) -> str:
    """The mark a page read takes first: the hub's, forwarded with the request, in a page worker; this
    process's own otherwise."""
    return request.scope.get("state", {}).get(FORWARDED_MARK) or app_state(request).page_feed.mark()


def publish(app: StateOwner, *topics: str) -> None:
    """After a commit, on the event loop: tell open pages that these topics changed."""
    app_state(app).page_feed.publish(*topics)


def after_commit(session: Session, *topics: str) -> None:
    """Publish `topics` once `session`'s transaction commits (from the thread that commits); nothing
    if it rolls back. For a service's write on a session of app.db.Database (the request session,
    app/deps.get_session, which the dependency commits before the response is sent), which carries the feed."""
    feed: PageFeed | None = session.info.get("page_feed")
    if feed is None:
        return  # a session outside a request (CLI, tests): no open pages to tell
    if "page_topics" not in session.info:
        session.info["page_topics"] = set()
    session.info["page_topics"].update(topics)
    if session.info.get("page_listening"):
        return
    session.info["page_listening"] = True

    def committed(sess: Session) -> None:
        found = sess.info.pop("page_topics", None)
        if found:
            feed.publish_threadsafe(*sorted(found))

    def rolled_back(sess: Session, previous_transaction: Any) -> None:
        if previous_transaction.parent is None:  # the whole transaction, not a savepoint inside it
            sess.info.pop("page_topics", None)

    event.listen(session, "after_commit", committed)
    event.listen(session, "after_soft_rollback", rolled_back)


@event.listens_for(Session, "after_commit")
def _inbox_committed(session: Session) -> None:
    """The inboxes a committed transaction wrote to (app/domain/inbox.py leaves their users on the session)
    are published, whichever service wrote them: a person's unread count moves live."""
    if session.in_nested_transaction():
        return  # a savepoint's commit: the transaction itself has not committed yet
    users = session.info.pop(inbox_domain.INBOX_USERS, None)
    feed: PageFeed | None = session.info.get("page_feed")
    if users and feed is not None:
        feed.publish_threadsafe(*(inbox(u) for u in sorted(users)))


@event.listens_for(Session, "after_soft_rollback")
def _inbox_rolled_back(session: Session, previous_transaction: Any) -> None:
    if previous_transaction.parent is None:  # the whole transaction, not a savepoint inside it
        session.info.pop(inbox_domain.INBOX_USERS, None)


async def start(app: StateOwner) -> None:
    """On the server's event loop: remember it (for publishes from worker threads) and end every page
    feed as soon as SIGTERM or SIGINT arrives (CloseCode.GOING_AWAY: the pages reconnect to the next
    server and catch up), before uvicorn waits for its open connections."""
    feed = app_state(app).page_feed
    loop = asyncio.get_running_loop()
    feed.loop = loop
    if threading.current_thread() is not threading.main_thread():
        return  # a server run in a thread (tests): it has no signal handlers to chain
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(sig)
        if not callable(previous):
            continue

        def on_signal(signum: int, frame: Any, previous: Any = previous) -> None:
            loop.call_soon_threadsafe(feed.close_all)
            previous(signum, frame)

        signal.signal(sig, on_signal)


def stop(app: StateOwner) -> None:
    app_state(app).page_feed.close_all()
