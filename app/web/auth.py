"""Login by one-time link (printed by `campaign serve` / `campaign login-url`), the first login of
a new board (it names the board's admin), accepting an invite, and logout.

`POST /login` and `POST /invite/{token}` are the only writes anyone may send without a session
(app/middleware.py lets them through): the secret in the form is their credential, and the
Origin must be this server's."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import RedirectResponse, Response

from app.config import Settings
from app.deps import SessionDep, SettingsDep, UserDep, WriteSessionDep, same_origin
from app.domain.errors import DomainError, Invalid
from app.domain.logins import (
    InviteRefused,
    accept_invite,
    end_session,
    login_link_is_setup,
    open_invite,
    redeem_login_token,
    redeem_setup_token,
)
from app.security import SESSION_COOKIE
from app.state import app_state

router = APIRouter(include_in_schema=False)
DEFAULT_ADMIN_NAME = "admin"


def _safe_next(target: str | None) -> str:
    # Only same-site paths: never redirect to another host after login.
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


def _logged_in(request: Request, settings: Settings, session_id: str, target: str | None) -> Response:
    response = RedirectResponse(_safe_next(target), status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        app_state(request).session_signer.issue(session_id),
        max_age=settings.session_max_age_s,
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
    )
    return response


def _page(request: Request, template: str, context: dict, status_code: int = 200) -> Response:
    return app_state(request).templates.TemplateResponse(request, template, context, status_code=status_code)


def _user_agent(request: Request) -> str:
    return request.headers.get("user-agent", "")


def _require_same_origin(request: Request) -> None:
    if not same_origin(request) or request.headers.get("sec-fetch-site") == "cross-site":
        raise HTTPException(403, "Cross-origin request refused.")


def _login_refused(request: Request, message: str) -> Response:
    """A wrong, spent or expired link: 403, or 429 once its address is past the limit of failures. Only
    failures are limited: a valid link always logs in, whoever else guessed wrong from the same address
    (behind a proxy a whole team shares one); a link's 256 random bits are what defeat guessing."""
    limiter = app_state(request).login_limiter
    client = request.client.host if request.client else "unknown"
    wait_s = limiter.retry_after(client)
    if wait_s:
        response = _page(request, "login.html", {"error": f"Too many failed login attempts: wait {wait_s} s."}, 429)
        response.headers["Retry-After"] = str(wait_s)
        return response
    limiter.failed(client)
    return _page(request, "login.html", {"error": message}, 403)


@router.get("/login")
def login(
    request: Request, session: WriteSessionDep, settings: SettingsDep, token: str | None = None, next: str | None = None
) -> Response:
    if not token:
        return _page(request, "login.html", {"error": None})
    try:
        if login_link_is_setup(session, token):
            # The first login of a new board: ask who its admin is before spending the link.
            context = {"error": None, "setup_token": token, "name": DEFAULT_ADMIN_NAME, "next": _safe_next(next)}
            return _page(request, "login.html", context)
        session_id = redeem_login_token(session, token, settings.session_max_age_s, _user_agent(request))
    except DomainError as exc:
        return _login_refused(request, exc.message)
    session.commit()
    return _logged_in(request, settings, session_id, next)


@router.post("/login")
def first_login(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    token: Annotated[str, Form(max_length=200)],
    name: Annotated[str, Form(max_length=200)] = "",
    next: Annotated[str, Form(max_length=2000)] = "/",
) -> Response:
    """The first-admin form: spend the first-admin link and create the admin it names."""
    _require_same_origin(request)
    try:
        session_id = redeem_setup_token(session, token, name, settings.session_max_age_s, _user_agent(request))
    except Invalid as exc:
        if exc.field != "name":
            return _login_refused(request, exc.message)
        context = {"error": exc.message, "setup_token": token, "name": name, "next": _safe_next(next)}
        return _page(request, "login.html", context, exc.status_code)
    return _logged_in(request, settings, session_id, next)


def _invite_form(
    request: Request, session: SessionDep, token: str, name: str | None = None, error: DomainError | None = None
) -> Response:
    """The invite's page: its form (`name` typed, else the suggested one; `error` said next to it), or why the
    invite cannot be used."""
    try:
        invite = open_invite(session, token)
    except InviteRefused as exc:
        return _page(request, "invite.html", {"refused": exc.message, "invite": None}, exc.status_code)
    context = {"refused": None, "invite": invite, "name": invite.name if name is None else name}
    context["error"] = error.message if error else None
    return _page(request, "invite.html", context, error.status_code if error else 200)


@router.get("/invite/{token}")
def invite_page(request: Request, session: SessionDep, token: str) -> Response:
    return _invite_form(request, session, token)


@router.post("/invite/{token}")
def invite_accept(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    token: str,
    name: Annotated[str, Form(max_length=200)] = "",
) -> Response:
    """The invitee's chosen name: their user is created with the invite's role and logged in."""
    _require_same_origin(request)
    try:
        session_id = accept_invite(session, token, name, settings.session_max_age_s, _user_agent(request))
    except InviteRefused as exc:
        return _page(request, "invite.html", {"refused": exc.message, "invite": None}, exc.status_code)
    except DomainError as exc:  # a bad or taken name: say so next to the field, keep what was typed
        session.rollback()
        return _invite_form(request, session, token, name, exc)
    return _logged_in(request, settings, session_id, "/")


@router.post("/logout")
def logout(session: SessionDep, operator: UserDep) -> Response:
    if operator.session_id:
        end_session(session, operator.session_id)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE)
    return response
