"""People pages: Users (roles, disable, invites; admin), API tokens (admin) and Sessions (your own,
or everyone's for an admin). Each write answers htmx with its page's panel block, a plain form
with a 303 back to the page."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from app.deps import AdminDep, RowId, SessionDep, UserDep, public_base_url
from app.domain import logins, users
from app.web.render import render

router = APIRouter(include_in_schema=False)

INVITE_DAYS = (1, 3, 7, 14, 30)


def _answer(request: Request, page: str, template: str, context: dict[str, Any]) -> Response:
    if request.headers.get("hx-request"):
        return render(request, template, context, block="panel")
    return RedirectResponse(page, status_code=303)


def _block(request: Request) -> str | None:
    return "panel" if request.headers.get("hx-request") else None


def _users_context(session: Any, created: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "users": users.list_users(session),
        "invites": [(invite, logins.invite_state(invite)) for invite in logins.list_invites(session)],
        "roles": list(users.ROLE_RANK),
        "invite_days": INVITE_DAYS,
        "created": created,
    }


@router.get("/users")
def users_page(request: Request, session: SessionDep, operator: AdminDep) -> Response:
    return render(request, "users.html", _users_context(session))


@router.post("/users/{user_id}/role")
def users_role(
    request: Request, session: SessionDep, operator: AdminDep, user_id: RowId, role: Annotated[str, Form()]
) -> Response:
    users.change_role(session, users.get_user(session, user_id), role)
    return _answer(request, "/users", "users.html", _users_context(session))


@router.post("/users/{user_id}/disable")
def users_disable(request: Request, session: SessionDep, operator: AdminDep, user_id: RowId) -> Response:
    users.set_disabled(session, users.get_user(session, user_id), True)
    return _answer(request, "/users", "users.html", _users_context(session))


@router.post("/users/{user_id}/enable")
def users_enable(request: Request, session: SessionDep, operator: AdminDep, user_id: RowId) -> Response:
    users.set_disabled(session, users.get_user(session, user_id), False)
    return _answer(request, "/users", "users.html", _users_context(session))


@router.post("/invites")
def invites_create(
    request: Request,
    session: SessionDep,
    operator: AdminDep,
    role: Annotated[str, Form()],
    name: Annotated[str, Form(max_length=200)] = "",
    days: Annotated[int, Form(ge=1, le=30)] = 7,
) -> Response:
    invite, token = logins.create_invite(session, operator, role, name, days * 24 * 3600)
    created = {"url": f"{public_base_url(request)}/invite/{token}", "role": invite.role, "name": invite.name}
    # The link is shown once, so this answer is the panel even for a plain form post.
    return render(request, "users.html", _users_context(session, created), block=_block(request))


@router.post("/invites/{invite_id}/revoke")
def invites_revoke(request: Request, session: SessionDep, operator: AdminDep, invite_id: RowId) -> Response:
    logins.revoke_invite(session, invite_id)
    return _answer(request, "/users", "users.html", _users_context(session))


def _tokens_context(session: Any, created: dict[str, str] | None = None) -> dict[str, Any]:
    return {"tokens": logins.list_api_tokens(session), "users": users.list_users(session), "created": created}


@router.get("/tokens")
def tokens_page(request: Request, session: SessionDep, operator: AdminDep) -> Response:
    return render(request, "tokens.html", _tokens_context(session))


@router.post("/tokens")
def tokens_create(
    request: Request,
    session: SessionDep,
    operator: AdminDep,
    name: Annotated[str, Form(min_length=1, max_length=120)],
    user_id: Annotated[int, Form(ge=1, le=2**63 - 1)],
) -> Response:
    user = users.get_user(session, user_id)
    token = logins.create_api_token(session, name.strip(), user)
    created = {"token": token, "name": name.strip(), "user": user.name, "role": user.role}
    return render(request, "tokens.html", _tokens_context(session, created), block=_block(request))


@router.post("/tokens/{token_id}/revoke")
def tokens_revoke(request: Request, session: SessionDep, operator: AdminDep, token_id: RowId) -> Response:
    logins.revoke_api_token_id(session, token_id)
    return _answer(request, "/tokens", "tokens.html", _tokens_context(session))


def _sessions_context(session: Any, operator: Any) -> dict[str, Any]:
    # An admin sees everyone's sessions; anyone else their own.
    mine = None if operator.is_admin else operator.user_id if operator.user_id is not None else -1
    return {
        "sessions": logins.live_sessions(session, user_id=mine, current=operator.session_id),
        "everyone": mine is None,
    }


@router.get("/sessions")
def sessions_page(request: Request, session: SessionDep, operator: UserDep) -> Response:
    return render(request, "sessions.html", _sessions_context(session, operator))


@router.post("/sessions/{session_row_id}/revoke")
def sessions_revoke(request: Request, session: SessionDep, operator: UserDep, session_row_id: RowId) -> Response:
    """Your own session (any role may end theirs), or anyone's for an admin; refused at once."""
    logins.revoke_session(session, session_row_id, operator)
    return _answer(request, "/sessions", "sessions.html", _sessions_context(session, operator))
