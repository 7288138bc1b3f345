"""The page feed: a websocket, /api/pages/feed?topic=campaign:3&topic=runners&since=<mark>.

One socket per open page, read-only. It needs a logged-in browser session (or an API token) and, like
the live-log socket, this server's Origin; a refused socket gets an HTTP answer instead of the upgrade
(401 not logged in, 403 another origin, 422 a bad topic), with its reason. Each message is a notice
that a topic changed (app/services/events.py `notice`), never the data itself:

    {"id": "<boot>.<seq>", "topic": "campaign:3", "event": "feed:campaign"}

static/pagefeed.js fires `event` on the page's fragments (`hx-trigger="feed:campaign"`), which re-fetch
themselves, so the HTML always comes from the same templates as on load. On (re)connect the socket first
sends one notice for every topic published after `since` (the page's mark, moved forward by every
notice it got): a page that was away catches up.

Why a websocket and not server-sent events: a browser keeps at most six HTTP/1.1 connections per origin,
and an event stream holds one for as long as its page is open; the seventh tab never loaded, and the
open tabs' own requests waited behind the streams. Websockets are outside that pool (Chromium allows
255 per profile), so the page's fetches keep all six.

A socket ends with the server (close code 1001: the page reconnects and catches up), or when the session
or API token it was opened with ends (4401, app/services/access.py: the page stops and says so).
"""

from __future__ import annotations

import asyncio
import contextlib

from fastapi import APIRouter, HTTPException, WebSocket, WebSocketDisconnect
from starlette.responses import JSONResponse

from app.deps import operator_from, same_origin
from app.protocol.messages import CloseCode
from app.services import access, events
from app.state import app_state

router = APIRouter(tags=["pages"])

CLOSE_TIMEOUT_S = 5.0  # a close frame behind unread notices: a stuck reader is dropped after this


def _refusal(ws: WebSocket, topics: list[str]) -> tuple[int, str] | None:
    """Why this socket may not open (HTTP status, reason), or None. Reads the database: run on a thread."""
    operator = operator_from(ws)
    if operator is None:
        return 401, "Log in first: the page feed needs a session."
    if ws.headers.get("sec-fetch-site") == "cross-site" or not same_origin(ws):
        return 403, "Cross-origin request refused."
    if not topics or len(topics) > events.MAX_TOPICS:
        return 422, f"topic: give 1 to {events.MAX_TOPICS} topics"
    for t in topics:
        if not events.TOPIC.fullmatch(t):
            return 422, (
                f"topic: {t[:80]!r} is not campaign:<id>, approach:<id>, trial:<id>, inbox:<your id>, runners or "
                "heartbeats"
            )
    theirs = events.inbox(operator.user_id)
    if any(events.kind(t) == "inbox" and t != theirs for t in topics):
        return 403, "topic: an inbox is followed only by its owner"
    return None


async def _refuse(ws: WebSocket, status: int, reason: str) -> None:
    """Answer the upgrade with an HTTP error and its reason (a close before accept where the server
    cannot: the client then sees 403)."""
    if "websocket.http.response" in ws.scope.get("extensions", {}):
        await ws.send_denial_response(JSONResponse({"detail": reason}, status_code=status))
    else:
        await ws.close(code=CloseCode.POLICY, reason=reason)


async def _until_disconnect(ws: WebSocket) -> None:
    """Read the page's socket (a page sends nothing that matters) until it closes."""
    while (await ws.receive())["type"] != "websocket.disconnect":
        pass


async def _send_notices(ws: WebSocket, stream: events.Stream, first: list[str]) -> None:
    for text in first:
        await ws.send_text(text)
    while True:
        await stream.wake.wait()
        if stream.closed:
            return
        for text in stream.take():
            await ws.send_text(text)


@router.websocket(events.FEED_PATH)
async def page_feed(ws: WebSocket) -> None:
    topics = list(dict.fromkeys(ws.query_params.getlist("topic")))
    refusal = await asyncio.to_thread(_refusal, ws, topics)
    if refusal is not None:
        await _refuse(ws, *refusal)
        return
    feed = app_state(ws).page_feed
    stream = feed.open(topics)  # before reading the mark: a publish in between is sent, not lost
    missed = feed.missed(topics, ws.query_params.get("since", "")[:64])
    mark = feed.mark()
    watched = access.watch(ws.app, access.credential(ws), lambda: stream.close("credential"))
    sender: asyncio.Task | None = None
    reader: asyncio.Task | None = None
    try:
        await ws.accept()
        sender = asyncio.create_task(_send_notices(ws, stream, [events.notice(mark, t) for t in missed]))
        reader = asyncio.create_task(_until_disconnect(ws))
        await asyncio.wait({sender, reader}, return_when=asyncio.FIRST_COMPLETED)
        if reader.done():
            return  # the page left
        await sender  # the stream was closed: say why
        code, reason = (
            (CloseCode.UNAUTHORIZED, "your session ended: log in again")
            if stream.ended == "credential"
            else (CloseCode.GOING_AWAY, "the server is restarting")
        )
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ws.close(code=code, reason=reason), CLOSE_TIMEOUT_S)
    except (WebSocketDisconnect, RuntimeError, OSError):
        pass  # the page went away mid-send
    finally:
        access.unwatch(ws.app, watched)
        feed.release(stream)
        for task in (sender, reader):
            if task is None:
                continue
            if not task.done():
                task.cancel()
            # Awaited even when done: a closed tab fails both at once (the sender's WebSocketDisconnect), and an
            # exception nobody retrieves is logged as "Task exception was never retrieved".
            with contextlib.suppress(BaseException):
                await task


# A plain GET (a script, an old page's EventSource) gets a clear answer instead of a 404.
@router.get(events.FEED_PATH, include_in_schema=False)
async def page_feed_over_http() -> None:
    raise HTTPException(
        426, "The page feed is a websocket: connect with ws:// (static/pagefeed.js does).", {"Upgrade": "websocket"}
    )
