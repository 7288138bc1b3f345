"""People on the board and what their role lets them do (docs/security.md "Roles").

Rules: display names are unique (case-insensitive) and short; roles are ordered viewer < operator
< admin; a board keeps at least one enabled admin (the last one can be neither demoted nor
disabled). Secrets (login links, invites, tokens, sessions) live in app/domain/logins.py; their hashing in app/domain/credentials.py.
"""

from __future__ import annotations

import re

from sqlalchemy import func
from sqlmodel import Session, col, select

from app.domain.credentials import CREDENTIALS_ENDED
from app.domain.errors import Conflict, Invalid, or_not_found
from app.models import Role, User, utcnow

ROLE_RANK = {Role.viewer: 0, Role.operator: 1, Role.admin: 2}
NAME_MAX = 40
# Letters (any script), digits, and a few separators; starts with a letter or digit.
NAME_PATTERN = r"^[^\W_][\w .'-]*$"
_NAME = re.compile(NAME_PATTERN)


def role_at_least(role: str, wanted: Role) -> bool:
    return ROLE_RANK.get(Role(role) if role in Role.__members__ else Role.viewer, 0) >= ROLE_RANK[wanted]


def parse_role(value: str) -> Role:
    try:
        return Role(value)
    except ValueError:
        raise Invalid(f"Unknown role {value!r}: choose viewer, operator or admin.", field="role") from None


def clean_name(name: str) -> str:
    """A display name as stored, or Invalid naming the rule it breaks."""
    name = " ".join(name.split())
    if not name:
        raise Invalid("Choose a display name.", field="name")
    if len(name) > NAME_MAX:
        raise Invalid(f"A display name is at most {NAME_MAX} characters.", field="name")
    if not _NAME.match(name):
        raise Invalid(
            "A display name starts with a letter or digit and holds letters, digits, spaces, '.', '-', \"'\" or '_'.",
            field="name",
        )
    return name


def has_users(session: Session) -> bool:
    return session.exec(select(User.id).limit(1)).first() is not None


def list_users(session: Session) -> list[User]:
    return list(session.exec(select(User).order_by(col(User.id))).all())


def get_user(session: Session, user_id: int) -> User:
    return or_not_found(session.get(User, user_id), f"No user with id {user_id}.")


def user_by_name(session: Session, name: str) -> User:
    user = session.exec(select(User).where(func.lower(User.name) == name.strip().lower())).first()
    return or_not_found(user, f"No user named {name!r}.", field="user")


def first_admin(session: Session) -> User | None:
    """The board's first enabled admin (the default owner of shell-made login links and tokens)."""
    return session.exec(
        select(User).where(User.role == Role.admin, col(User.disabled_at).is_(None)).order_by(col(User.id)).limit(1)
    ).first()


def create_user(session: Session, name: str, role: Role | str) -> User:
    """A new user; a taken name (in any letter case) is a Conflict on the name field."""
    name, role = clean_name(name), parse_role(str(role))
    if session.exec(select(User.id).where(func.lower(User.name) == name.lower())).first() is not None:
        raise Conflict(f"The name {name!r} is taken: choose another.", field="name")
    user = User(name=name, role=role)
    session.add(user)
    session.flush()
    return user


def _enabled_admins(session: Session) -> int:
    # Locks the admin rows (PostgreSQL; SQLite's write transaction already serializes), so two
    # admins demoting each other at once cannot leave the board with none.
    rows = session.exec(
        select(User.id).where(User.role == Role.admin, col(User.disabled_at).is_(None)).with_for_update()
    ).all()
    return len(rows)


def _keep_an_admin(session: Session, user: User, action: str) -> None:
    if user.role == Role.admin and user.disabled_at is None and _enabled_admins(session) <= 1:
        raise Conflict(f"{user.name} is the board's last admin and cannot be {action}: make another admin first.")


def change_role(session: Session, user: User, role: Role | str) -> User:
    role = parse_role(str(role))
    if role != Role.admin:
        _keep_an_admin(session, user, "demoted")
    user.role = role
    session.add(user)
    session.flush()
    return user


def set_disabled(session: Session, user: User, disabled: bool) -> User:
    """Disable (their sessions and tokens stop working at once: every request checks) or enable."""
    if disabled and user.disabled_at is None:
        _keep_an_admin(session, user, "disabled")
        user.disabled_at = utcnow()
        session.info[CREDENTIALS_ENDED] = True
    elif not disabled:
        user.disabled_at = None
    session.add(user)
    session.flush()
    return user
