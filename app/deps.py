"""Dependencies shared by the HTML and JSON routes (Annotated aliases, one place)."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlmodel import Session

from app.config import Settings
from app.db import open_session, session_scope
from app.security import (CSRF_FORM_FIELD, CSRF_HEADER, SESSION_COOKIE, Operator, api_token_name,
                          csrf_ok, origin_ok)

UNSAFE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    """One transaction per request; write requests take the write lock up front (see app.db)."""
    with session_scope(request.app.state.engine, write=request.method in UNSAFE_METHODS) as session:
        yield session


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
# A row id in a URL: out-of-range numbers are a 422, not an integer overflow in the database driver.
RowId = Annotated[int, Path(ge=1, le=2**63 - 1, description="Row id")]
SessionDep = Annotated[Session, Depends(get_session)]


class NotLoggedIn(Exception):
    """Raised for a request that needs an operator; app/errors.py turns it into 401 or a login redirect."""


def _bearer(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return None


def current_operator(request: Request) -> Operator | None:
    """The operator this request comes from, checking cookie or bearer token (not CSRF)."""
    settings: Settings = request.app.state.settings
    if not settings.auth_enabled:
        return Operator(name="local", csrf_token=None)
    token = _bearer(request)
    if token:
        with open_session(request.app.state.engine, write=False) as session:
            name = api_token_name(session, token)
        return Operator(name=f"token:{name}", csrf_token=None) if name else None
    return request.app.state.session_signer.read(request.cookies.get(SESSION_COOKIE))


# Declares the Bearer scheme in OpenAPI (the Authorize button of /docs); current_operator reads the header.
bearer_scheme = HTTPBearer(auto_error=False, scheme_name="APIToken",
                           description="An API token: `campaign token create NAME` prints one.")


async def require_operator(request: Request,
                           _bearer_token: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)] = None,
                           ) -> Operator:
    """Every non-public route depends on this. Unsafe methods from a browser session must also
    carry the session's CSRF token (header or form field) and a same-origin Origin."""
    operator = current_operator(request)
    if operator is None:
        raise NotLoggedIn()
    if request.method in UNSAFE_METHODS and operator.csrf_token is not None:
        if not origin_ok(request.headers.get("origin"), request.headers.get("host")):
            raise HTTPException(403, "Cross-origin request refused.")
        presented = request.headers.get(CSRF_HEADER)
        if presented is None and request.headers.get("content-type", "").startswith(
            ("application/x-www-form-urlencoded", "multipart/form-data")
        ):
            presented = (await request.form()).get(CSRF_FORM_FIELD)  # type: ignore[assignment]
        if not csrf_ok(operator.csrf_token, presented if isinstance(presented, str) else None):
            raise HTTPException(403, "Missing or wrong CSRF token: reload the page and try again.")
    return operator


OperatorDep = Annotated[Operator, Depends(require_operator)]
