"""ASGI middleware that guards every route before any route code runs (docs/security.md).

Order, outermost first (see app.main): the Host allowlist (TrustedHostMiddleware: a DNS-rebinding
request gets 400, websockets too), browser hardening headers on every response, the request body
limit (413 before reading past it, chunked bodies too), then authentication of every request and
websocket (unsafe methods before their body is read) unless its route is on `PUBLIC_ROUTES`.
"""

from __future__ import annotations

import json
import re

from anyio import to_thread
from fastapi import HTTPException
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket

from app.deps import OPERATOR_SCOPE_KEY, operator_from
from app.errors import error_response, login_required
from app.protocol.messages import CloseCode

# Pages load scripts and styles from this server only; no inline script anywhere (htmx reads its
# config from a <meta> tag). Inline style attributes stay allowed: Plotly sets them.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "font-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
]
UNSAFE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
# The one list of routes a stranger may reach (every method of each); anything else, any method, page,
# API route or websocket, needs a login (a session or an API token) before route code runs.
# tests/security/test_public_routes.py walks the route table against it: a new route is private
# until it is named here, with its reason.
PUBLIC_ROUTES: dict[str, str] = {
    "/login": "the login page, a login link and the first-admin form (the link's secret is the credential)",
    "/invite/{token}": "an invite's page and its accept form (the secret in the URL is the credential)",
    "/healthz": "liveness for a proxy or a probe: version and role, no campaign data",
    "/favicon.ico": "the icon",
    "/static/{path:path}": "front-end assets (CSS, JS, vendored htmx, Plotly, Swagger UI)",
    "/static/v/{path:path}": "the same assets under versioned URLs",
    "/docs": "Swagger UI's page; every operation it tries needs a login or an API token",
    "/openapi.json": "the API's schema (no data)",
    "/s/{token}": "a share page (the link's token is the credential, read-only)",
    "/s/{token}/export.html": "a share page's export (the link's token is the credential)",
    "/s/{rest:path}": "refuses every write under /s/ with 405",
    "/api/runners/ws": "the runner socket: a runner's own token, checked by the socket (app/api/runner_socket.py)",
}
_PUBLIC_PATTERNS = [compile_path(path)[0] for path in PUBLIC_ROUTES]
# The writes a stranger may send: the first-admin form and accepting an invite (the one-time
# secret in the form is the credential; app/web/auth.py checks the Origin). Share pages take none.
PUBLIC_WRITES = ("/login",)
PUBLIC_WRITE_PREFIXES = ("/invite/",)


def is_public(path: str) -> bool:
    """Whether a request path belongs to a route on `PUBLIC_ROUTES`."""
    return any(pattern.match(path) for pattern in _PUBLIC_PATTERNS)


def _public_for(scope: Scope) -> bool:
    if not is_public(scope["path"]):
        return False
    if scope["type"] == "http" and scope["method"] in UNSAFE_METHODS:  # the public writes are fewer
        path = scope["path"]
        return path in PUBLIC_WRITES or path.startswith(PUBLIC_WRITE_PREFIXES) or path.startswith("/s/")
    return True


class SecurityHeaders:
    """Adds CSP, nosniff, Referrer-Policy and framing refusal to every HTTP response that does not
    set its own (share pages set a stricter policy of their own)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers.extend((name, value) for name, value in SECURITY_HEADERS if name not in present)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class BodyTooLarge(HTTPException):
    """Raised from `receive` when a streamed body passes the limit; an HTTPException so that
    FastAPI's body reader passes it on (as a 413) instead of calling it a parse error."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"Request body too large: this route accepts at most {limit} bytes.")


def _plain(status: int, detail: str, headers: list[tuple[bytes, bytes]] | None = None):
    body = json.dumps({"detail": detail}).encode()

    async def respond(send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                    *(headers or []),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    return respond


class BodyLimit:
    """Refuses request bodies over the route's limit with 413: at once when Content-Length says
    so, else as soon as the streamed bytes pass it (nothing past the limit is read).
    `limits` maps a path suffix to its own limit (the campaign-file import), `patterns` a full-path pattern
    (an artifact upload's chunk)."""

    def __init__(
        self, app: ASGIApp, default: int, limits: dict[str, int], patterns: dict[re.Pattern[str], int] | None = None
    ) -> None:
        self.app, self.default, self.limits, self.patterns = app, default, limits, patterns or {}

    def limit_for(self, path: str) -> int:
        for suffix, limit in self.limits.items():
            if path.endswith(suffix):
                return limit
        for pattern, limit in self.patterns.items():
            if pattern.fullmatch(path):
                return limit
        return self.default

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"])
        message = f"Request body too large: this route accepts at most {limit:,} bytes ({limit / 2**20:.1f} MiB)."

        async def too_large(send: Send) -> None:
            # The same error body as every other answer: JSON for the API, the form's error for a page's htmx
            # form (a 30 MB import said by the form, not raw JSON in it), the error page for a plain post.
            request = Request(scope)
            if "app" not in scope or request.url.path.startswith("/api/"):
                await _plain(413, message)(send)
                return
            response = error_response(request, message, 413, "file" if scope["path"].endswith("/import") else None)
            response.headers["connection"] = "close"  # the rest of the body is never read
            await response(scope, receive, send)

        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is not None:
            try:
                if int(length) > limit:
                    await too_large(send)
                    return
            except ValueError:
                await _plain(400, "Invalid Content-Length.")(send)
                return
        received = 0
        started = False

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await too_large(send)


# Trial artifact uploads (app/api/artifacts.py) take a runner's token too: the route checks it, before the body.
RUNNER_UPLOADS = re.compile(r"/api/trials/[0-9]+/(uploads/.+|artifacts)")


def _runner_upload(scope: Scope) -> bool:
    has_bearer = any(k == b"authorization" and v[:7].lower() == b"bearer " for k, v in scope.get("headers", []))
    return has_bearer and RUNNER_UPLOADS.fullmatch(scope["path"]) is not None


class AuthenticateFirst:
    """Every request and websocket needs a login (a live session or an API token) unless its route is on
    `PUBLIC_ROUTES`: default deny, so a route added anywhere is private without code of its own (roles and
    CSRF stay with `app/deps.py: require_operator`). Unsafe methods are refused before their body is read:
    an anonymous 100 MB POST costs a header check, not 100 MB of memory. The operator found here is kept
    on the scope, so the route does not look it up again."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or _public_for(scope) or _runner_upload(scope):
            await self.app(scope, receive, send)
            return
        operator = await to_thread.run_sync(operator_from, HTTPConnection(scope))
        if operator is None:
            if scope["type"] == "websocket":
                await _refuse_socket(scope, receive, send)
            else:
                await login_required(Request(scope, receive))(scope, receive, send)
            return
        scope[OPERATOR_SCOPE_KEY] = operator
        await self.app(scope, receive, send)


SOCKET_LOGIN_REQUIRED = "Log in first: this socket needs a session or an API token."


async def _refuse_socket(scope: Scope, receive: Receive, send: Send) -> None:
    """An anonymous websocket: an HTTP 401 answer to the upgrade where the server can send one (uvicorn),
    else a close before accept (the client sees 403)."""
    ws = WebSocket(scope, receive, send)
    if "websocket.http.response" in scope.get("extensions", {}):
        await ws.send_denial_response(JSONResponse({"detail": SOCKET_LOGIN_REQUIRED}, status_code=401))
    else:
        await ws.close(code=CloseCode.LOGIN_REQUIRED, reason="log in first")
