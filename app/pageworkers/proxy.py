"""The hub's side of the page workers at request time (app/pageworkers/pool.py runs the processes): `PageProxy`,
its outermost middleware, hands a read to the least busy ready worker with the page feed's mark taken now, and
`FromHub`, in a worker, takes the hub's forwarded headers (the mark, the client) as its own."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import httpx
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.pageworkers.pool import PageWorkerPool
from app.protocol.messages import CloseCode
from app.services.page_events import FORWARDED_MARK
from app.state import app_state

log = logging.getLogger(__name__)

# Requests the hub always answers itself (paths of GET routes with an effect or a stream in the hub).
HUB_ONLY = frozenset({"/login", "/api/pages/feed", "/healthz"})
FORWARDED = (b"x-campaign-feed-mark", b"x-campaign-client", b"x-campaign-scheme")  # set by the hub only
HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"te", b"trailer", b"upgrade"}
)


def _has_body(scope: Scope) -> bool:
    return any((k == b"content-length" and v.strip() != b"0") or k == b"transfer-encoding" for k, v in scope["headers"])


def forwarded(scope: Scope) -> bool:
    """A read the workers answer. A GET or HEAD that announces a body (only fuzzers send one) stays here:
    the relay sends no body, and the hub's body limit and its 405 apply to it as to any request."""
    return (
        scope["type"] == "http"
        and scope["method"] in ("GET", "HEAD")
        and scope["path"] not in HUB_ONLY
        and not _has_body(scope)
    )


class PageProxy:
    """The hub's outermost middleware: a read goes to the least busy ready page worker, with the page
    feed's mark taken now; anything else, or any read while no worker is ready, runs here."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        pool: PageWorkerPool | None = app_state(scope["app"]).page_workers if "app" in scope else None
        if pool is None or not forwarded(scope):
            await self.app(scope, receive, send)
            return
        worker = pool.pick()
        if worker is None:
            pool.fallbacks += 1
            await self.app(scope, receive, send)
            return
        assert worker.client is not None
        request = self._request(scope, worker.client)
        worker.in_flight += 1
        try:
            try:
                response = await worker.client.send(request, stream=True)
            except httpx.TransportError as exc:  # the worker is gone or stuck: answer here, it is restarted
                log.warning("page worker %d did not answer (%s): served by the hub", worker.index, exc)
                worker.ready = False
                if worker.proc is not None and worker.proc.poll() is None:
                    worker.proc.kill()
                pool.fallbacks += 1
                await self.app(scope, receive, send)
                return
            worker.served += 1
            await self._relay(response, receive, send)
        finally:
            worker.in_flight -= 1

    @staticmethod
    def _request(scope: Scope, client: httpx.AsyncClient) -> httpx.Request:
        headers = [(k, v) for k, v in scope["headers"] if k not in FORWARDED and k not in HOP_BY_HOP]
        headers.append((b"x-campaign-feed-mark", app_state(scope["app"]).page_feed.mark().encode()))
        if scope.get("client"):
            host, port = scope["client"][:2]
            headers.append((b"x-campaign-client", f"{host}:{port}".encode()))
        headers.append((b"x-campaign-scheme", scope.get("scheme", "http").encode()))
        path = scope.get("raw_path") or scope["path"].encode()
        query = scope.get("query_string", b"")
        target = path + (b"?" + query if query else b"")
        url = httpx.URL("http://page-worker").copy_with(raw_path=target)
        if not any(k == b"host" for k, _ in headers):
            headers.append((b"host", b"localhost"))
        return client.build_request(scope["method"], url, headers=headers)

    @staticmethod
    async def _relay(response: httpx.Response, receive: Receive, send: Send) -> None:
        """Stream the worker's answer; stop reading it as soon as the client goes away."""

        async def body() -> None:
            headers = [(k, v) for k, v in response.headers.raw if k.lower() not in HOP_BY_HOP]
            await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        async def disconnected() -> None:
            while True:
                message: Message = await receive()
                if message["type"] == "http.disconnect":
                    return

        relay = asyncio.create_task(body())
        watch = asyncio.create_task(disconnected())
        try:
            await asyncio.wait({relay, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
            if not relay.done():
                relay.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
            try:
                await relay
            except asyncio.CancelledError:
                pass
            finally:
                await response.aclose()


class FromHub:
    """A page worker's outermost middleware: the client address, scheme and page-feed mark the hub
    forwarded (the worker's socket is in a 0700 folder: only the hub reaches it). A write or a
    websocket that reaches a worker is refused: those belong to the hub."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD"):
            if scope["type"] == "websocket":
                await send(
                    {"type": "websocket.close", "code": CloseCode.POLICY, "reason": "page workers take reads only"}
                )
                return
            await _misdirected(send)
            return
        found = {k.decode(): v.decode("latin-1") for k, v in scope["headers"] if k in FORWARDED}
        scope = dict(scope)
        client = found.get("x-campaign-client", "")
        host, _, port = client.rpartition(":")
        if host and port.isdigit():
            scope["client"] = (host, int(port))
        if found.get("x-campaign-scheme") in ("http", "https"):
            scope["scheme"] = found["x-campaign-scheme"]
        mark = found.get("x-campaign-feed-mark", "")
        if mark and len(mark) <= 64:
            scope.setdefault("state", {})
            scope["state"] = {**scope["state"], FORWARDED_MARK: mark}
        await self.app(scope, receive, send)


async def _misdirected(send: Send) -> None:
    body = b'{"detail":"Page workers take reads only: send writes to the server\'s public address."}'
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 421, "headers": headers})
    await send({"type": "http.response.body", "body": body})
