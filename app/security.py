"""Who may do what: one-time login links, API tokens, signed session cookies, CSRF and Origin checks.

Secrets are stored only as SHA-256 hashes. A login link works once; the browser then holds a
signed session cookie carrying a per-session CSRF token. Scripts use `Authorization: Bearer <token>`
(API tokens are not ambient credentials, so they need no CSRF token).
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from itsdangerous import BadSignature, URLSafeTimedSerializer
from sqlmodel import Session, select

from app.domain.errors import Invalid
from app.models import AuthToken, utcnow

SESSION_COOKIE = "cb_session"
CSRF_HEADER = "X-CSRF-Token"
CSRF_FORM_FIELD = "csrf_token"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_secret(prefix: str) -> str:
    return f"{prefix}_{secrets.token_urlsafe(32)}"


def _aware(ts: datetime | None) -> datetime | None:
    # SQLite returns naive datetimes even for timezone-aware columns; they were written as UTC.
    if ts is not None and ts.tzinfo is None:
        return ts.replace(tzinfo=timezone.utc)
    return ts


def create_login_token(session: Session, ttl_s: int) -> str:
    token = new_secret("login")
    session.add(AuthToken(kind="login", name="login link", token_hash=hash_token(token),
                          expires_at=utcnow() + timedelta(seconds=ttl_s)))
    session.flush()
    return token


def redeem_login_token(session: Session, token: str) -> None:
    """Spend a one-time login token. Raises Invalid when unknown, used, revoked or expired."""
    row = session.exec(select(AuthToken).where(AuthToken.token_hash == hash_token(token),
                                               AuthToken.kind == "login")).first()
    now = utcnow()
    if row is None or row.used_at or row.revoked_at or (_aware(row.expires_at) or now) < now:
        raise Invalid("This login link is not valid (unknown, already used or expired). "
                      "Run `campaign login-url` for a new one.")
    row.used_at = now
    session.add(row)
    session.flush()


def create_api_token(session: Session, name: str) -> str:
    token = new_secret("cbt")
    session.add(AuthToken(kind="api", name=name, token_hash=hash_token(token)))
    session.flush()
    return token


def api_token_name(session: Session, token: str) -> str | None:
    """The name of a live API token, or None."""
    row = session.exec(select(AuthToken).where(AuthToken.token_hash == hash_token(token),
                                               AuthToken.kind == "api")).first()
    if row is None or row.revoked_at:
        return None
    return row.name


def revoke_api_token(session: Session, name: str) -> int:
    rows = session.exec(select(AuthToken).where(AuthToken.kind == "api", AuthToken.name == name,
                                                AuthToken.revoked_at.is_(None))).all()  # type: ignore[union-attr]
    for row in rows:
        row.revoked_at = utcnow()
        session.add(row)
    session.flush()
    return len(rows)


@dataclass(frozen=True)
class Operator:
    """Someone allowed to change state: a logged-in browser or a script with an API token."""

    name: str
    csrf_token: str | None  # None for bearer-token callers


class SessionSigner:
    def __init__(self, secret_key: str, max_age_s: int) -> None:
        self._s = URLSafeTimedSerializer(secret_key, salt="campaign-board-session")
        self.max_age_s = max_age_s

    def issue(self, name: str = "operator") -> str:
        return self._s.dumps({"name": name, "csrf": secrets.token_urlsafe(24)})

    def read(self, cookie: str | None) -> Operator | None:
        if not cookie:
            return None
        try:
            data = self._s.loads(cookie, max_age=self.max_age_s)
        except BadSignature:
            return None
        if not isinstance(data, dict) or "csrf" not in data:
            return None
        return Operator(name=str(data.get("name", "operator")), csrf_token=str(data["csrf"]))


def csrf_ok(expected: str, presented: str | None) -> bool:
    return bool(presented) and hmac.compare_digest(expected, presented or "")


def origin_ok(origin: str | None, host: str | None) -> bool:
    """A browser's Origin (when sent) must be this server; cross-site writes are refused."""
    if not origin:
        return True
    if origin == "null" or not host:
        return False
    return origin.split("://", 1)[-1].rstrip("/") == host
