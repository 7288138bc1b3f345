"""Dependencies shared by the HTML and JSON routes (Annotated aliases, one place)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlmodel import Session
from starlette.requests import HTTPConnection

from app.config import Settings
from app.db import open_session
from app.domain.logins import Operator, session_user, token_operator
from app.models import Role
from app.security import CSRF_FORM_FIELD, CSRF_HEADER, SESSION_COOKIE, csrf_ok, origin_ok
from app.services.events import page_mark
from app.state import app_state

UNSAFE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


@dataclass
class RequestState:
    """What the board keeps on a request between its dependencies, its route and `render`: Starlette's
    `request.state` is untyped, so only `request_state` touches it."""

    feed_mark: str = ""  # the page feed's mark, taken before the page read the database (`take_feed_mark`)


def request_state(request: HTTPConnection) -> RequestState:
    found = getattr(request.state, "board", None)
    if not isinstance(found, RequestState):
        found = RequestState()
        request.state.board = found
    return found


def take_feed_mark(request: HTTPConnection) -> None:
    """Before a page reads the database: keep the page feed's mark for its render, so the page knows what
    it may have missed (the hub's mark when a page worker serves the read; see app/api/pagefeed.py)."""
    request_state(request).feed_mark = page_mark(request)


def get_settings_dep(request: Request) -> Settings:
    return app_state(request).settings


def get_session(request: Request) -> Iterator[Session]:
    """One transaction per request. Unsafe methods get a write transaction (the write lock up
    front, see app.db); safe methods a read-only one, where a write raises at once. The page feed's
    mark is taken first (a page knows what it may have missed) and writes may publish after commit (the
    session carries the page feed and the access watch: app.db.Database.info)."""
    take_feed_mark(request)
    with app_state(request).db.scope(write=request.method in UNSAFE_METHODS) as session:
        yield session


def get_write_session(request: Request) -> Iterator[Session]:
    """A write transaction whatever the method: for the few GET routes that write (login)."""
    with app_state(request).db.scope(write=True) as session:
        yield session


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
# A row id in a URL: out-of-range numbers are a 422, not an integer overflow in the database driver.
RowId = Annotated[int, Path(ge=1, le=2**53, description="Row id")]
PageAfter = Annotated[int | None, Query(ge=1, le=2**53, description="A page's cursor: the last id you have")]
LogAfter = Annotated[int, Query(ge=-1, le=2**53, description="The last log seq you have (-1: none)")]
# scope="function": the transaction commits before the response is sent, so a client that got a
# 2xx reads its own write, and a failed commit is an error response, never a lost write after a 2xx.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
WriteSessionDep = Annotated[Session, Depends(get_write_session, scope="function")]


class NotLoggedIn(Exception):
    """Raised for a request that needs an operator; app/errors.py turns it into 401 or a login redirect."""


def bearer_token(request: HTTPConnection) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return None


# Where app/middleware.py: AuthenticateFirst leaves the operator it found, so routes do not look it up again.
OPERATOR_SCOPE_KEY = "campaign_board.operator"


def operator_from(conn: HTTPConnection) -> Operator | None:
    """Who an HTTP request or a websocket comes from, with their user's current role: by bearer
    token or by a live server-side session (not CSRF). Read from the database every time, so a
    revoked session, a disabled user or a changed role takes effect at once. With login disabled
    a browser is the "local" admin, who still carries a CSRF token: cross-site requests are
    refused either way."""
    if OPERATOR_SCOPE_KEY in conn.scope:  # found by the middleware for this very request
        return conn.scope[OPERATOR_SCOPE_KEY]
    app = conn.app
    token = bearer_token(conn)
    if token:
        with open_session(app_state(app).engine, write=False) as session:
            operator = token_operator(session, token)
        if operator is not None:
            return operator
        if app_state(app).settings.auth_enabled:
            return None
    if not app_state(app).settings.auth_enabled:
        return Operator(name="local", csrf_token=app_state(app).session_signer.local_csrf_token(), role=Role.admin)
    cookie = app_state(app).session_signer.read(conn.cookies.get(SESSION_COOKIE))
    if cookie is None or cookie.session_id is None:
        return None
    with open_session(app_state(app).engine, write=False) as session:
        found = session_user(session, cookie.session_id)
    if found is None:
        return None
    _row, user = found
    return Operator(
        name=user.name, csrf_token=cookie.csrf_token, session_id=cookie.session_id, role=user.role, user_id=user.id
    )


def current_operator(request: Request) -> Operator | None:
    return operator_from(request)


def same_origin(conn: HTTPConnection) -> bool:
    return origin_ok(conn.headers.get("origin"), conn.headers.get("host"), app_state(conn).settings.public_url)


def public_base_url(conn: HTTPConnection) -> str:
    """This board's address as people reach it (the public URL behind a proxy), for links to hand out."""
    public_url = app_state(conn).settings.public_url
    return public_url.rstrip("/") if public_url else str(conn.base_url).rstrip("/")


def socket_operator(conn: HTTPConnection, *, writes: bool) -> Operator | None:
    """Who a browser websocket comes from (this server's Origin required), or None to refuse it.
    Any role may follow a socket that only reads (a viewer follows live logs); a socket that
    accepts writes passes writes=True and needs operator or above, as unsafe HTTP methods do."""
    if not same_origin(conn):
        return None
    operator = operator_from(conn)
    if operator is None or (writes and not operator.can_change):
        return None
    return operator


# Declares the Bearer scheme in OpenAPI (the Authorize button of /docs); current_operator reads the header.
bearer_scheme = HTTPBearer(
    auto_error=False,
    scheme_name="APIToken",
    description="An API token; it acts as its user, with their role (Tokens page, or `campaign token create NAME --user NAME`).",
)


async def require_user(
    request: Request,
    _bearer_token: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)] = None,
) -> Operator:
    """Anyone logged in, whatever their role: for the few routes a viewer may write to (log out,
    end their own sessions). Unsafe methods from a browser (a session, or any browser when login
    is disabled) must also carry the CSRF token (header or form field) and a same-origin Origin."""
    operator = current_operator(request)
    if operator is None:
        raise NotLoggedIn()
    if request.method in UNSAFE_METHODS and operator.csrf_token is not None:
        if not same_origin(request) or request.headers.get("sec-fetch-site") == "cross-site":
            raise HTTPException(403, "Cross-origin request refused.")
        presented = request.headers.get(CSRF_HEADER)
        if presented is None and request.headers.get("content-type", "").startswith(
            ("application/x-www-form-urlencoded", "multipart/form-data")
        ):
            presented = (await request.form()).get(CSRF_FORM_FIELD)  # type: ignore[assignment]
        if not csrf_ok(operator.csrf_token, presented if isinstance(presented, str) else None):
            raise HTTPException(403, "Missing or wrong CSRF token: reload the page and try again.")
    return operator


VIEWER_REFUSED = "You are a viewer on this board: you can look, not change. Ask an admin for the operator role."
ADMIN_ONLY = "Only an admin can do this."


async def require_operator(request: Request, operator: Annotated[Operator, Depends(require_user)]) -> Operator:
    """Every non-public route depends on this (directly or through its router), and this is the
    one place roles meet methods: any role may read (GET), an unsafe method (POST, PUT, PATCH,
    DELETE) needs operator or above, so a route added anywhere gets the rule without code of
    its own. Runs before the body is parsed (FastAPI resolves dependencies first)."""
    if request.method in UNSAFE_METHODS and not operator.can_change:
        raise HTTPException(403, VIEWER_REFUSED)
    return operator


async def require_admin(operator: Annotated[Operator, Depends(require_operator)]) -> Operator:
    """Admin-only routes declare this (users, invites, others' sessions, API tokens, runners)."""
    if not operator.is_admin:
        raise HTTPException(403, ADMIN_ONLY)
    return operator


OperatorDep = Annotated[Operator, Depends(require_operator)]
UserDep = Annotated[Operator, Depends(require_user)]
AdminDep = Annotated[Operator, Depends(require_admin)]
