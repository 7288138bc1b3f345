"""The page feed: GET /api/pages/feed?topic=campaign:3&topic=runners&since=<mark>, server-sent events.

One stream per open page, read-only. It needs a logged-in browser session (or an API token) and,
like the live-log socket, this server's Origin (a cross-site EventSource is refused). Each event is
a notice that a topic changed (app/services/events.py), never the data itself:

    id: <boot>.<seq>
    event: campaign            (the topic's kind: campaign, approach, trial or runners)
    data: campaign:3

The page's fragments re-fetch themselves on it (`hx-trigger="sse:campaign"`, htmx-ext-sse), so
the HTML always comes from the same templates as on load. On (re)connect the stream first sends
one notice for every topic published after `since` (the page's mark, or the Last-Event-ID a
reconnecting EventSource sends): a page that was away catches up. Streams end at shutdown, and
when the session or API token they were opened with ends (app/services/access.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.deps import operator_from, same_origin
from app.services import access, events

router = APIRouter(tags=["pages"])

KEEPALIVE_S = 15.0  # a comment line now and then: proxies keep the stream open, dead peers show


class FeedResponse(Response):
    """A text/event-stream that writes the stream's notices as they come, until the client leaves or
    the server shuts down (the stream is closed, the response ends)."""

    media_type = "text/event-stream"

    def __init__(
        self, feed: events.PageFeed, stream: events.Stream, first: str, credential: tuple[str, str] | None
    ) -> None:
        super().__init__(
            content=None,
            media_type=self.media_type,
            headers={"Cache-Control": "no-cache, no-store", "X-Accel-Buffering": "no"},
        )
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]  # endless
        self.feed, self.stream, self.first, self.credential = feed, stream, first, credential

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stream = self.stream

        async def until_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            stream.close()

        watcher = asyncio.create_task(until_disconnect())
        watched = access.watch(scope["app"], self.credential, stream.close)  # a revoked session ends it
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            await send({"type": "http.response.body", "body": self.first.encode(), "more_body": True})
            while not stream.closed:
                try:
                    await asyncio.wait_for(stream.wake.wait(), KEEPALIVE_S)
                except TimeoutError:
                    await send({"type": "http.response.body", "body": b": keepalive\n\n", "more_body": True})
                    continue
                if stream.closed:
                    break
                body = "".join(stream.take()).encode()
                await send({"type": "http.response.body", "body": body, "more_body": True})
            with contextlib.suppress(Exception):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client went away mid-write
        finally:
            access.unwatch(scope["app"], watched)
            self.feed.release(stream)
            watcher.cancel()
            with contextlib.suppress(BaseException):
                await watcher


# Not in OpenAPI: a browser page's endless stream (like the live-log socket), not an API for scripts.
@router.get("/api/pages/feed", include_in_schema=False)
async def page_feed(
    request: Request,
    topic: Annotated[
        list[str],
        Query(description="campaign:<id>, approach:<id>, trial:<id>, runners or heartbeats; repeat for several"),
    ],
    since: Annotated[str, Query(max_length=64, description="The page's mark: notices after it are sent first")] = "",
) -> Response:
    if await asyncio.to_thread(operator_from, request) is None:
        raise HTTPException(401, "Log in first: the page feed needs a session.")
    if request.headers.get("sec-fetch-site") == "cross-site" or not same_origin(request):
        raise HTTPException(403, "Cross-origin request refused.")
    topics = list(dict.fromkeys(topic))
    if not topics or len(topics) > events.MAX_TOPICS:
        raise HTTPException(422, f"topic: give 1 to {events.MAX_TOPICS} topics")
    for t in topics:
        if not events.TOPIC.fullmatch(t):
            raise HTTPException(
                422, f"topic: {t[:80]!r} is not campaign:<id>, approach:<id>, trial:<id>, runners or heartbeats"
            )
    feed = events.get_feed(request.app)
    stream = feed.open(topics)  # before reading the mark: a publish in between is sent, not lost
    last_id = request.headers.get("last-event-id", "")[:64]
    missed = feed.missed(topics, last_id or since)
    mark = feed.mark()
    first = (
        "retry: 1000\n\n"
        + "".join(f"id: {mark}\nevent: {events.kind(t)}\ndata: {t}\n\n" for t in missed)
        + ": open\n\n"
    )
    return FeedResponse(feed, stream, first, access.credential(request))
