"""Who is signed in, as database rows: one-time login links, browser sessions, API tokens and invites, and
the `Operator` a session or token acts as (with its user's role). See docs/security.md.

Secrets are stored only as SHA-256 hashes (app/domain/credentials.py). A login link works once (one
conditional UPDATE, so concurrent redeems have exactly one winner) and opens a server-side `BrowserSession`,
whose id the browser's signed cookie names (app/security.py signs it); logout or `campaign sessions revoke`
ends the record, and with it the cookie, at once. An invite likewise works once and creates its user. Pure
domain: a sqlmodel Session, no web framework.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, update
from sqlmodel import Session, col, select

from app.domain import users
from app.domain.credentials import CREDENTIALS_ENDED, hash_token, new_secret
from app.domain.errors import Conflict, DomainError, Invalid, NotFound, or_not_found
from app.models import AuthToken, BrowserSession, Invite, Role, User, aware, utcnow


@dataclass(frozen=True)
class Operator:
    """Whoever makes a request: a logged-in browser or a script with an API token, with the
    role of the user behind it. (Named before roles existed: a viewer is an Operator too.)"""

    name: str
    csrf_token: str | None  # None for bearer-token callers
    session_id: str | None = None  # the server-side session of a logged-in browser
    role: str = Role.viewer  # least privilege unless the database says otherwise
    user_id: int | None = None
    token_name: str | None = None

    def can(self, role: Role) -> bool:
        return users.role_at_least(self.role, role)

    @property
    def can_change(self) -> bool:
        """Operator or above: may use unsafe methods and websocket writes."""
        return self.can(Role.operator)

    @property
    def is_admin(self) -> bool:
        return self.can(Role.admin)


def create_login_token(session: Session, ttl_s: int, user: User | None = None) -> str:
    """A one-time login link for `user` (default: the first admin). On a board with no users yet
    the link names nobody: redeeming it creates the board's first admin (`redeem_setup_token`)."""
    if user is None:
        user = users.first_admin(session)
    elif user.disabled_at is not None:
        raise Invalid(f"{user.name} is disabled: enable them first.", field="user")
    token = new_secret("login")
    session.add(
        AuthToken(
            kind="login",
            name="login link" if user else "first admin",
            user_id=user.id if user else None,
            token_hash=hash_token(token),
            expires_at=utcnow() + timedelta(seconds=ttl_s),
        )
    )
    session.flush()
    return token


LOGIN_LINK_INVALID = (
    "This login link is not valid (unknown, already used or expired). Run `campaign login-url` for a new one."
)


def _live_login_token(session: Session, token: str) -> AuthToken | None:
    row = session.exec(
        select(AuthToken).where(AuthToken.token_hash == hash_token(token), AuthToken.kind == "login")
    ).first()
    now = utcnow()
    if row is None or row.used_at or row.revoked_at or (aware(row.expires_at) or now) < now:
        return None
    return row


def login_link_is_setup(session: Session, token: str) -> bool:
    """True when the token is a live first-admin link of a board that still has no users
    (the login page then asks for the admin's display name); Invalid when it is not live."""
    row = _live_login_token(session, token)
    if row is None:
        raise Invalid(LOGIN_LINK_INVALID)
    return row.user_id is None and not users.has_users(session)


def _spend_login_token(session: Session, token: str) -> AuthToken:
    # One conditional UPDATE spends the token, so of any number of concurrent redeems exactly one
    # changes a row (PostgreSQL re-checks the WHERE after the row lock; SQLite serializes writers);
    # the unique `login_token_id` of `browser_session` makes a second session impossible anyway.
    now = utcnow()
    spent = session.execute(
        update(AuthToken)
        .where(
            col(AuthToken.token_hash) == hash_token(token),
            col(AuthToken.kind) == "login",
            col(AuthToken.used_at).is_(None),
            col(AuthToken.revoked_at).is_(None),
            (col(AuthToken.expires_at).is_(None)) | (col(AuthToken.expires_at) >= now),
        )
        .values(used_at=now)
        .returning(col(AuthToken.id))
        .execution_options(synchronize_session=False)
    ).first()
    if spent is None:
        raise Invalid(LOGIN_LINK_INVALID)
    row = session.get(AuthToken, spent[0])
    assert row is not None
    return row


def open_session(
    session: Session,
    user: User,
    max_age_s: int,
    *,
    login_token_id: int | None = None,
    invite_id: int | None = None,
    user_agent: str = "",
) -> str:
    """A server-side browser session for `user`; returns its id (the cookie carries it, signed)."""
    session_id = secrets.token_urlsafe(32)
    session.add(
        BrowserSession(
            session_hash=hash_token(session_id),
            login_token_id=login_token_id,
            invite_id=invite_id,
            user_id=user.id,
            name=user.name,
            user_agent=user_agent[:200],
            expires_at=utcnow() + timedelta(seconds=max_age_s),
        )
    )
    session.flush()
    return session_id


def redeem_login_token(session: Session, token: str, max_age_s: int, user_agent: str = "") -> str:
    """Spend a one-time login token of an existing user and open a session; returns the session id.
    Raises Invalid when the token is unknown, used, revoked or expired, or names a disabled user,
    or is a first-admin link (those go through `redeem_setup_token`, which asks for a name)."""
    row = _spend_login_token(session, token)
    user = session.get(User, row.user_id) if row.user_id is not None else users.first_admin(session)
    if user is None:
        raise Invalid("This is the board's first-admin link: choose a display name on the login page first.")
    if user.disabled_at is not None:
        raise Invalid(f"{user.name} is disabled: ask an admin.")
    return open_session(session, user, max_age_s, login_token_id=row.id, user_agent=user_agent)


def redeem_setup_token(session: Session, token: str, name: str, max_age_s: int, user_agent: str = "") -> str:
    """The first login of a new board: spend the first-admin link, create the admin named `name`
    and open their session. Refused once the board has any user (the link is then spent too)."""
    name = users.clean_name(name)  # before spending: a bad name keeps the link usable
    row = _spend_login_token(session, token)
    if row.user_id is not None or users.has_users(session):
        raise Invalid("This board already has an admin: ask them for an invite, or run `campaign login-url`.")
    admin = users.create_user(session, name, Role.admin)
    return open_session(session, admin, max_age_s, login_token_id=row.id, user_agent=user_agent)


@dataclass(frozen=True)
class SessionInfo:
    """A browser session as the sessions pages and API list it (never its secret)."""

    id: int
    user_id: int | None
    user_name: str
    created_at: datetime
    expires_at: datetime
    user_agent: str
    current: bool = False


def session_user(session: Session, session_id: str) -> tuple[BrowserSession, User] | None:
    """The live session with this id and its enabled user, in one query; None when revoked,
    expired, legacy (no user) or the user is disabled."""
    found = session.exec(
        select(BrowserSession, User)
        .join(User, col(User.id) == col(BrowserSession.user_id))
        .where(BrowserSession.session_hash == hash_token(session_id))
    ).first()
    if found is None:
        return None
    row, user = found
    now = utcnow()
    if row.revoked_at is not None or (aware(row.expires_at) or now) <= now or user.disabled_at is not None:
        return None
    return row, user


def session_is_live(session: Session, session_id: str) -> bool:
    return session_user(session, session_id) is not None


def end_session(session: Session, session_id: str) -> None:
    """Logout: the session's record is revoked, so its cookie is refused from now on."""
    session.execute(
        update(BrowserSession)
        .where(col(BrowserSession.session_hash) == hash_token(session_id), col(BrowserSession.revoked_at).is_(None))
        .values(revoked_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    session.info[CREDENTIALS_ENDED] = True


def revoke_session(session: Session, row_id: int, by: Operator) -> None:
    """End one session by its row id: your own, or anyone's for an admin. Someone else's session
    is NotFound to a non-admin (its existence is not theirs to learn)."""
    row = session.get(BrowserSession, row_id)
    mine = row is not None and by.user_id is not None and row.user_id == by.user_id
    if row is None or not (mine or users.role_at_least(by.role, Role.admin)):
        raise NotFound(f"No session with id {row_id}.")
    _revoke(session, row)


def _revoke(session: Session, row: BrowserSession | AuthToken) -> None:
    """A session or a token ends now (if it had not): its open streams close once this transaction commits."""
    if row.revoked_at is None:
        row.revoked_at = utcnow()
        session.add(row)
        session.flush()
        session.info[CREDENTIALS_ENDED] = True


def revoke_all_sessions(session: Session) -> int:
    """An admin ends every browser session (`campaign sessions revoke`); returns how many."""
    result = session.execute(
        update(BrowserSession)
        .where(col(BrowserSession.revoked_at).is_(None))
        .values(revoked_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    session.info[CREDENTIALS_ENDED] = True
    return cast("CursorResult[Any]", result).rowcount or 0  # an UPDATE's result is a CursorResult


def live_sessions(session: Session, user_id: int | None = None, current: str | None = None) -> list[SessionInfo]:
    """Live sessions, oldest first: everyone's, or one user's. `current` marks the caller's own."""
    now = utcnow()
    query = (
        select(BrowserSession, User)
        .join(User, col(User.id) == col(BrowserSession.user_id), isouter=True)
        .where(col(BrowserSession.revoked_at).is_(None), col(BrowserSession.expires_at) > now)
        .order_by(col(BrowserSession.id))
    )
    if user_id is not None:
        query = query.where(BrowserSession.user_id == user_id)
    current_hash = hash_token(current) if current else None
    return [
        SessionInfo(
            id=row.id or 0,
            user_id=row.user_id,
            user_name=user.name if user else row.name,
            created_at=aware(row.created_at) or now,
            expires_at=aware(row.expires_at) or now,
            user_agent=row.user_agent,
            current=row.session_hash == current_hash,
        )
        for row, user in session.exec(query).all()
    ]


def create_api_token(session: Session, name: str, user: User | None = None) -> str:
    """An API token acting as `user` with their role (default: the first admin). Made from the
    shell on a board with no users yet, it names nobody and acts as an admin."""
    user = user or users.first_admin(session)
    token = new_secret("cbt")
    session.add(AuthToken(kind="api", name=name, user_id=user.id if user else None, token_hash=hash_token(token)))
    session.flush()
    return token


def token_operator(session: Session, token: str) -> Operator | None:
    """Who a live API token acts as, or None (unknown, revoked, or its user is disabled)."""
    found = session.exec(
        select(AuthToken, User)
        .join(User, col(User.id) == col(AuthToken.user_id), isouter=True)
        .where(AuthToken.token_hash == hash_token(token), AuthToken.kind == "api")
    ).first()
    if found is None:
        return None
    row, user = found
    if row.revoked_at is not None:
        return None
    if user is None:  # made from the shell before the board had users
        return Operator(name=f"token:{row.name}", csrf_token=None, role=Role.admin)
    if user.disabled_at is not None:
        return None
    return Operator(name=user.name, csrf_token=None, role=user.role, user_id=user.id, token_name=row.name)


def api_token_name(session: Session, token: str) -> str | None:
    """The name of a live API token, or None."""
    operator = token_operator(session, token)
    return None if operator is None else operator.token_name or operator.name.removeprefix("token:")


@dataclass(frozen=True)
class TokenInfo:
    id: int
    name: str
    user_id: int | None
    user_name: str
    role: str
    created_at: datetime


def list_api_tokens(session: Session, token: str | None = None) -> list[TokenInfo]:
    """Live API tokens (never their secrets), oldest first; or just the one whose secret is `token`."""
    query = (
        select(AuthToken, User)
        .join(User, col(User.id) == col(AuthToken.user_id), isouter=True)
        .where(AuthToken.kind == "api", col(AuthToken.revoked_at).is_(None))
        .order_by(col(AuthToken.id))
    )
    if token is not None:
        query = query.where(AuthToken.token_hash == hash_token(token))
    rows = session.exec(query).all()
    return [
        TokenInfo(
            id=row.id or 0,
            name=row.name,
            user_id=row.user_id,
            user_name=user.name if user else "(shell)",
            role=user.role if user else Role.admin,
            created_at=aware(row.created_at) or utcnow(),
        )
        for row, user in rows
    ]


def revoke_api_token_id(session: Session, token_id: int) -> None:
    row = session.get(AuthToken, token_id)
    if row is None or row.kind != "api":
        raise NotFound(f"No API token with id {token_id}.")
    _revoke(session, row)


def revoke_api_token(session: Session, name: str) -> int:
    rows = session.exec(
        select(AuthToken).where(AuthToken.kind == "api", AuthToken.name == name, col(AuthToken.revoked_at).is_(None))
    ).all()
    for row in rows:
        _revoke(session, row)
    return len(rows)


def create_invite(session: Session, by: Operator, role: str, name: str, ttl_s: int) -> tuple[Invite, str]:
    """An invite (one-time link) for a teammate with `role`; returns the row and its secret."""
    role = users.parse_role(role)
    name = users.clean_name(name) if name.strip() else ""
    token = new_secret("invite")
    invite = Invite(
        token_hash=hash_token(token),
        role=role,
        name=name,
        created_by_id=by.user_id,
        expires_at=utcnow() + timedelta(seconds=ttl_s),
    )
    session.add(invite)
    session.flush()
    return invite, token


def invite_state(invite: Invite) -> str:
    """open, used, revoked or expired."""
    if invite.used_at is not None:
        return "used"
    if invite.revoked_at is not None:
        return "revoked"
    if (aware(invite.expires_at) or utcnow()) <= utcnow():
        return "expired"
    return "open"


INVITE_REFUSED = {
    "used": "This invite has already been used. Ask an admin for a new one.",
    "revoked": "This invite was revoked by an admin. Ask them for a new one.",
    "expired": "This invite has expired. Ask an admin for a new one.",
    "unknown": "This invite link is not valid (mistyped or cut short?). Ask an admin for a new one.",
}


def open_invite(session: Session, token: str) -> Invite:
    """The invite behind a link, if it can still be used; Gone (410) saying why otherwise."""
    invite = session.exec(select(Invite).where(Invite.token_hash == hash_token(token))).first()
    state = "unknown" if invite is None else invite_state(invite)
    if invite is None or state != "open":
        raise InviteRefused(INVITE_REFUSED[state])
    return invite


class InviteRefused(DomainError):
    status_code = 410


def accept_invite(session: Session, token: str, name: str, max_age_s: int, user_agent: str = "") -> str:
    """The invitee picks a display name: spend the invite (one conditional UPDATE: one winner),
    create their user with the invite's role and open their session; returns the session id."""
    invite = open_invite(session, token)
    name = users.clean_name(name)
    now = utcnow()
    spent = session.execute(
        update(Invite)
        .where(
            col(Invite.id) == invite.id,
            col(Invite.used_at).is_(None),
            col(Invite.revoked_at).is_(None),
            col(Invite.expires_at) > now,
        )
        .values(used_at=now)
        .execution_options(synchronize_session=False)
    )
    if not cast("CursorResult[Any]", spent).rowcount:
        raise InviteRefused(INVITE_REFUSED["used"])
    user = users.create_user(session, name, invite.role)
    invite.used_by_id = user.id
    session.add(invite)
    return open_session(session, user, max_age_s, invite_id=invite.id, user_agent=user_agent)


def list_invites(session: Session) -> list[Invite]:
    return list(session.exec(select(Invite).order_by(col(Invite.id).desc())).all())


def revoke_invite(session: Session, invite_id: int) -> Invite:
    invite = or_not_found(session.get(Invite, invite_id), f"No invite with id {invite_id}.")
    if invite_state(invite) != "open":
        raise Conflict(f"This invite is already {invite_state(invite)}.")
    invite.revoked_at = utcnow()
    session.add(invite)
    session.flush()
    return invite
