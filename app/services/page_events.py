"""The page events' vocabulary, a leaf module (nothing of the app's state): the topics a page follows
(`campaign:<id>`, `approach:<id>`, `trial:<id>`, `inbox:<id>`, `runners`, `heartbeats`), the DOM events a page
listens for (`PAGE_EVENTS`, declared once: templates write hx-trigger with `hx_trigger(...)`, scripts read the
names from <body data-page-events>, `page_events_json`), a notice as the feed sends it, and the feed element's
attributes. The feed itself is app/services/page_feed.py; publishing is app/services/events.py."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape

from app.protocol.messages import CloseCode

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
    **{
        k: PageEvent(DOM_EVENT_PREFIX + k, "app/services/page_events.py notice(), on a page feed notice") for k in KINDS
    },
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
            raise KeyError(f"no page event {name!r}: PAGE_EVENTS in app/services/page_events.py declares them")
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


FORWARDED_MARK = "forwarded_feed_mark"  # request.state key: the hub's mark, in a page worker (app/pageworkers/pool.py)
