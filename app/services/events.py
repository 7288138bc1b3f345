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
import json
import logging
import re
import signal
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape
from sqlalchemy import event
from sqlmodel import Session
from starlette.requests import HTTPConnection

from app.domain import inbox as inbox_domain
from app.protocol.messages import CloseCode
from app.state import StateOwner, app_state

log = logging.getLogger(__name__)

COALESCE_S = 0.2  # at most one notice per topic per this many seconds (a burst's first at once)
RUNNERS = "runners"
HEARTBEATS = "heartbeats"  # every runner's heartbeat: coalesced over Settings.heartbeat_notice_s
ROW_KINDS = ("campaign", "approach", "trial", "inbox")  # topics of one row: `<kind>:<id>` (inbox: a user's)
KINDS = (*ROW_KINDS, RUNNERS, HEARTBEATS)  # every topic's kind
TOPIC = re.compile(rf"(?:({'|'.join(ROW_KINDS)}):([1-9][0-9]{{0,18}})|{RUNNERS}|{HEARTBEATS})")  # fullmatch
MAX_TOPICS = 8  # per stream
FEED_PATH = "/api/pages/feed"  # the page feed's websocket (app/api/pagefeed.py)
DOM_EVENT_PREFIX = "feed:"  # a notice of kind K fires the DOM event "feed:K" (hx-trigger="feed:campaign")
RETRY_MS = 1000  # a page whose feed closed opens it again after this (doubling while it fails, to 16x)


def campaign(campaign_id: int | None) -> str:
    return f"campaign:{campaign_id}"


def approach(approach_id: int | None) -> str:
    return f"approach:{approach_id}"


def trial(trial_id: int | None) -> str:
    return f"trial:{trial_id}"


def inbox(user_id: int | None) -> str:
    """A person's inbox (app/domain/inbox.py): only they may follow it (app/api/pagefeed.py)."""
    return f"inbox:{user_id}"


def of_trial(t: Any) -> tuple[str, ...]:
    """What a trial's change touches: its campaign's and approach's pages, its own, and the runners
    (busy / idle, current trial and phase)."""
    return campaign(t.campaign_id), approach(t.approach_id), trial(t.id), RUNNERS


def kind(topic: str) -> str:
    """The kind of a topic: campaign, approach, trial, runners or heartbeats."""
    return topic.split(":", 1)[0]


def dom_event(topic: str) -> str:
    """The DOM event a notice of this topic fires on the page's fragments (hx-trigger="feed:campaign")."""
    return PAGE_EVENTS[kind(topic)].name


def notice(mark: str, topic: str) -> str:
    """One notice as the feed sends it (a websocket text message): the mark it brings the page to, the
    topic that changed and the DOM event it fires."""
    return json.dumps({"id": mark, "topic": topic, "event": dom_event(topic)}, separators=(",", ":"))


@dataclass(frozen=True)
class PageEvent:
    """A DOM event a page's fragments listen for: its name, what fires it, and whether it is fired on
    <body> (a fragment then listens `from:body`)."""

    name: str
    fired_by: str  # the file that fires it first (tests/web/test_page_events.py checks it does)
    on_body: bool = False


STALE = "stale"
PAGE_EVENTS: dict[str, PageEvent] = {
    # A notice of a topic of kind K fires feed:K (static/pagefeed.js dispatches the notice's own "event").
    **{k: PageEvent(DOM_EVENT_PREFIX + k, "app/services/events.py notice(), on a page feed notice") for k in KINDS},
    # On one fragment: a notice held while the person edited it, or one that came during its own
    # re-fetch. Every fragment that follows a feed event follows this one too (hx_trigger adds it).
    STALE: PageEvent("feed-stale", "static/pagefeed.js, on a fragment whose notice was held or overtaken"),
    "campaign_changed": PageEvent("campaign-changed", "app/web/render.py CHANGED, a write's HX-Trigger", True),
    "trial_ended": PageEvent("trial-ended", "static/livelog.js, when the live log sees its trial end", True),
    "metrics_arrived": PageEvent("metrics-arrived", "static/livelog.js, after metric lines arrive", True),
    "form_error": PageEvent("form-error", "app/errors.py form_error_headers, an error's HX-Trigger", True),
}
HTMX_TRIGGERS = frozenset({"load", "change", "input"})  # htmx's and the browser's own, used as they are


def hx_trigger(*names: str) -> str:
    """An hx-trigger value (`hx-trigger="{{ hx_trigger('load', 'campaign_changed', 'campaign') }}"`) from
    keys of PAGE_EVENTS and htmx's own "load": a body event listens `from:body`, and a fragment that
    follows any page feed event also follows "stale". An unknown name raises (the page fails to render)."""
    specs = []
    for name in names:
        if name in HTMX_TRIGGERS:
            specs.append(name)
            continue
        if name not in PAGE_EVENTS:
            raise KeyError(f"no page event {name!r}: PAGE_EVENTS in app/services/events.py declares them")
        ev = PAGE_EVENTS[name]
        specs.append(f"{ev.name} from:body" if ev.on_body else ev.name)
    if any(name in KINDS for name in names) and STALE not in names:
        specs.append(PAGE_EVENTS[STALE].name)
    return ", ".join(specs)


def page_events_json() -> str:
    """The event names static/*.js fire or hear, by key (<body data-page-events='...'>)."""
    return json.dumps({key: ev.name for key, ev in PAGE_EVENTS.items()}, sort_keys=True, separators=(",", ":"))


def feed_path(topics: Iterable[str], since: str = "") -> str:
    """The page feed's address for these topics and the page's mark."""
    query = "&".join(f"topic={t}" for t in topics)  # topics are [a-z0-9:] only (TOPIC)
    return f"{FEED_PATH}?{query}&since={since}" if since else f"{FEED_PATH}?{query}"


def feed_attributes(topics: Iterable[str], since: str, css_class: str = "page-feed") -> Markup:
    """The attributes of a page's feed element (`<div {{ page_feed(topics, feed_mark) }}>`), which
    static/pagefeed.js reads: where to connect, and what the server's close codes and retry delay are. The
    navigation's inbox feed (base.html) is another such element, of class "inbox-feed"."""
    attrs = {
        "class": css_class,
        "data-feed-url": feed_path(topics, since),
        "data-feed-ended-code": str(CloseCode.UNAUTHORIZED),
        "data-feed-retry-ms": str(RETRY_MS),
    }
    return Markup(" ".join(f'{name}="{escape(value)}"' for name, value in attrs.items()))


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


FORWARDED_MARK = "forwarded_feed_mark"  # request.state key: the hub's mark, in a page worker (app/pageworkers/pool.py)


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
