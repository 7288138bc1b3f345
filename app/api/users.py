"""Users JSON API: who am I, users and their roles (admin), invites (admin), sessions (your own,
or anyone's for an admin), API tokens (admin). Errors are the shared `Error` shape (app/errors.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool

from app.deps import AdminDep, RowId, SessionDep, UserDep, public_base_url, require_user
from app.domain import logins, users
from app.domain.errors import Invalid
from app.models import Invite, Role, User, aware
from app.schemas import RowPublic

router = APIRouter(prefix="/api", tags=["users"], dependencies=[Depends(require_user)])
Utc = Annotated[datetime, BeforeValidator(aware)]  # SQLite hands back naive UTC


class UserPublic(RowPublic):
    id: int
    name: str
    role: Role
    created_at: Utc
    disabled: bool

    @classmethod
    def of(cls, user: User) -> UserPublic:
        return cls.of_row(user, disabled=user.disabled_at is not None)


class Me(BaseModel):
    id: int | None = Field(description="Your user id (null for a token made from the shell before any user existed).")
    name: str
    role: Role
    via: str = Field(description="session, token or local (login disabled)")


class UserUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is refused, not ignored
    role: Role | None = Field(None, description="viewer, operator or admin; the last admin cannot be demoted.")
    disabled: StrictBool | None = Field(None, description="Disable (sessions and tokens refused at once) or enable.")


class InviteCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is refused, not ignored
    role: Role = Role.operator
    name: str = Field(
        "",
        max_length=users.NAME_MAX,
        pattern=f"^$|{users.NAME_PATTERN}",
        description="Suggested display name (letters, digits, spaces, . - ' _); the invitee may change it.",
    )
    expires_in_days: int = Field(7, ge=1, le=30)


class InvitePublic(RowPublic):
    id: int
    role: Role
    name: str
    state: str = Field(description="open, used, revoked or expired")
    created_at: Utc
    expires_at: Utc
    used_by_id: int | None

    @classmethod
    def of(cls, invite: Invite) -> InvitePublic:
        return cls.of_row(invite, state=logins.invite_state(invite))


class InviteCreated(BaseModel):
    invite: InvitePublic
    url: str = Field(description="The one-time link to send; shown only in this response.")


class SessionPublic(BaseModel):
    id: int
    user_id: int | None
    user_name: str
    created_at: Utc
    expires_at: Utc
    user_agent: str
    current: bool = Field(description="The session making this request.")


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is refused, not ignored
    name: str = Field(min_length=1, max_length=120, description="What the token is for, e.g. 'ci'.")
    user_id: int | None = Field(None, ge=1, le=2**53, description="Who it acts as (default: you).")


class TokenPublic(BaseModel):
    id: int
    name: str
    user_id: int | None
    user_name: str
    role: Role
    created_at: Utc


class TokenCreated(TokenPublic):
    token: str = Field(description="The secret, shown only in this response: `Authorization: Bearer <token>`.")


@router.get("/me", response_model=Me)
def me(operator: UserDep) -> Me:
    via = "session" if operator.session_id else "token" if operator.csrf_token is None else "local"
    return Me(id=operator.user_id, name=operator.name, role=Role(operator.role), via=via)


@router.get("/users", response_model=list[UserPublic])
def list_users(session: SessionDep, operator: AdminDep) -> list[UserPublic]:
    return [UserPublic.of(user) for user in users.list_users(session)]


@router.patch("/users/{user_id}", response_model=UserPublic)
def update_user(user_id: RowId, data: UserUpdate, session: SessionDep, operator: AdminDep) -> UserPublic:
    user = users.get_user(session, user_id)
    if data.role is not None:
        users.change_role(session, user, data.role)
    if data.disabled is not None:
        users.set_disabled(session, user, data.disabled)
    return UserPublic.of(user)


@router.get("/invites", response_model=list[InvitePublic])
def invites(session: SessionDep, operator: AdminDep) -> list[InvitePublic]:
    return [InvitePublic.of(invite) for invite in logins.list_invites(session)]


@router.post("/invites", response_model=InviteCreated, status_code=201)
def new_invite(request: Request, data: InviteCreate, session: SessionDep, operator: AdminDep) -> InviteCreated:
    invite, token = logins.create_invite(session, operator, data.role, data.name, data.expires_in_days * 24 * 3600)
    return InviteCreated(invite=InvitePublic.of(invite), url=f"{public_base_url(request)}/invite/{token}")


@router.delete("/invites/{invite_id}", response_model=InvitePublic)
def delete_invite(invite_id: RowId, session: SessionDep, operator: AdminDep) -> InvitePublic:
    return InvitePublic.of(logins.revoke_invite(session, invite_id))


@router.get("/sessions", response_model=list[SessionPublic])
def sessions(
    session: SessionDep,
    operator: UserDep,
    user_id: Annotated[int | None, Query(ge=1, le=2**53, description="An admin's filter: one user's.")] = None,
) -> list[SessionPublic]:
    """Your live sessions; an admin sees everyone's (or one user's with `user_id`)."""
    if not operator.is_admin:
        user_id = operator.user_id if operator.user_id is not None else -1
    rows = logins.live_sessions(session, user_id=user_id, current=operator.session_id)
    return [SessionPublic(**row.__dict__) for row in rows]


@router.delete("/sessions/{session_id}", status_code=204)
def delete_session(session_id: RowId, session: SessionDep, operator: UserDep) -> Response:
    """End a session at once: your own (any role), or anyone's for an admin."""
    logins.revoke_session(session, session_id, operator)
    return Response(status_code=204)


@router.get("/tokens", response_model=list[TokenPublic])
def tokens(session: SessionDep, operator: AdminDep) -> list[TokenPublic]:
    return [TokenPublic(**row.__dict__) for row in logins.list_api_tokens(session)]


@router.post("/tokens", response_model=TokenCreated, status_code=201)
def new_token(data: TokenCreate, session: SessionDep, operator: AdminDep) -> TokenCreated:
    user_id = data.user_id or operator.user_id
    if user_id is None:
        raise Invalid("Name the user the token acts as (user_id).", field="user_id")
    user = users.get_user(session, user_id)
    token = logins.create_api_token(session, data.name.strip(), user)
    (info,) = logins.list_api_tokens(session, token)
    return TokenCreated(**info.__dict__, token=token)


@router.delete("/tokens/{token_id}", status_code=204)
def delete_token(token_id: RowId, session: SessionDep, operator: AdminDep) -> Response:
    logins.revoke_api_token_id(session, token_id)
    return Response(status_code=204)
