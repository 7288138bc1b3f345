"""Who may do what: one-time login links, API tokens, server-side sessions, CSRF and Origin checks.

Secrets are stored only as SHA-256 hashes. A login link works once (one conditional UPDATE, so
concurrent redeems have exactly one winner); the browser then holds a signed cookie naming a
server-side `BrowserSession` record plus a per-session CSRF token. Logout or `campaign sessions
revoke` ends the record, and with it the cookie, at once. Scripts use `Authorization: Bearer
<token>` (API tokens are not ambient credentials, so they need no CSRF token). With login
disabled the browser still needs a CSRF token (one per server, see `local_csrf_token`) and a
same-origin Origin, so a cross-site page cannot drive the board. See docs/security.md.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast
from urllib.parse import urlsplit

from itsdangerous import BadSignature, URLSafeTimedSerializer
from sqlalchemy import CursorResult, update
from sqlmodel import Session, col, select

from app.domain.errors import Invalid
from app.models import AuthToken, BrowserSession, utcnow

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
        return ts.replace(tzinfo=UTC)
    return ts


def create_login_token(session: Session, ttl_s: int) -> str:
    token = new_secret("login")
    session.add(
        AuthToken(
            kind="login",
            name="login link",
            token_hash=hash_token(token),
            expires_at=utcnow() + timedelta(seconds=ttl_s),
        )
    )
    session.flush()
    return token


def redeem_login_token(session: Session, token: str, max_age_s: int) -> str:
    """Spend a one-time login token and open a server-side session; returns the session id.

    One conditional UPDATE spends the token, so of any number of concurrent redeems exactly one
    changes a row (PostgreSQL re-checks the WHERE after the row lock; SQLite serializes writers);
    the unique `login_token_id` of `browser_session` makes a second session impossible anyway.
    Raises Invalid when the token is unknown, used, revoked or expired."""
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
        raise Invalid(
            "This login link is not valid (unknown, already used or expired). Run `campaign login-url` for a new one."
        )
    session_id = secrets.token_urlsafe(32)
    session.add(
        BrowserSession(
            session_hash=hash_token(session_id), login_token_id=spent[0], expires_at=now + timedelta(seconds=max_age_s)
        )
    )
    session.flush()
    return session_id


def session_is_live(session: Session, session_id: str) -> bool:
    row = session.exec(select(BrowserSession).where(BrowserSession.session_hash == hash_token(session_id))).first()
    return row is not None and row.revoked_at is None and (_aware(row.expires_at) or utcnow()) > utcnow()


def end_session(session: Session, session_id: str) -> None:
    """Logout: the session's record is revoked, so its cookie is refused from now on."""
    session.execute(
        update(BrowserSession)
        .where(col(BrowserSession.session_hash) == hash_token(session_id), col(BrowserSession.revoked_at).is_(None))
        .values(revoked_at=utcnow())
        .execution_options(synchronize_session=False)
    )


def revoke_all_sessions(session: Session) -> int:
    """An admin ends every browser session (`campaign sessions revoke`); returns how many."""
    result = session.execute(
        update(BrowserSession)
        .where(col(BrowserSession.revoked_at).is_(None))
        .values(revoked_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    return cast("CursorResult[Any]", result).rowcount or 0  # an UPDATE's result is a CursorResult


def live_sessions(session: Session) -> list[BrowserSession]:
    now = utcnow()
    return [
        row
        for row in session.exec(
            select(BrowserSession).where(col(BrowserSession.revoked_at).is_(None)).order_by(col(BrowserSession.id))
        ).all()
        if (_aware(row.expires_at) or now) > now
    ]


def create_api_token(session: Session, name: str) -> str:
    token = new_secret("cbt")
    session.add(AuthToken(kind="api", name=name, token_hash=hash_token(token)))
    session.flush()
    return token


def api_token_name(session: Session, token: str) -> str | None:
    """The name of a live API token, or None."""
    row = session.exec(
        select(AuthToken).where(AuthToken.token_hash == hash_token(token), AuthToken.kind == "api")
    ).first()
    if row is None or row.revoked_at:
        return None
    return row.name


def revoke_api_token(session: Session, name: str) -> int:
    rows = session.exec(
        select(AuthToken).where(AuthToken.kind == "api", AuthToken.name == name, col(AuthToken.revoked_at).is_(None))
    ).all()
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
    session_id: str | None = None  # the server-side session of a logged-in browser


class SessionSigner:
    """The session cookie: signed {session id, CSRF token}. Signature and age are checked here;
    whether the session is still live is the database's answer (`session_is_live`)."""

    def __init__(self, secret_key: str, max_age_s: int) -> None:
        self._s = URLSafeTimedSerializer(secret_key, salt="campaign-board-session")
        self._local_csrf = hmac.new(secret_key.encode(), b"campaign-board-local-csrf", hashlib.sha256).hexdigest()
        self.max_age_s = max_age_s

    def issue(self, session_id: str, name: str = "operator") -> str:
        return self._s.dumps({"sid": session_id, "name": name, "csrf": secrets.token_urlsafe(24)})

    def read(self, cookie: str | None) -> Operator | None:
        if not cookie:
            return None
        try:
            data = self._s.loads(cookie, max_age=self.max_age_s)
        except BadSignature:
            return None
        if not isinstance(data, dict) or "csrf" not in data or "sid" not in data:
            return None
        return Operator(
            name=str(data.get("name", "operator")), csrf_token=str(data["csrf"]), session_id=str(data["sid"])
        )

    def local_csrf_token(self) -> str:
        """The CSRF token when login is disabled: one per server secret, embedded in its pages.
        A cross-site page cannot read it (same-origin policy; the Host allowlist stops rebinding)."""
        return self._local_csrf


def csrf_ok(expected: str, presented: str | None) -> bool:
    return bool(presented) and hmac.compare_digest(expected, presented or "")


def origin_ok(origin: str | None, host: str | None, public_url: str | None = None) -> bool:
    """A browser's Origin (when sent) must be this server (its Host, or the public URL behind a
    proxy); cross-site writes and websocket connects are refused."""
    if not origin:
        return True
    if origin == "null" or not host:
        return False
    if public_url:
        parts = urlsplit(public_url)
        if origin.rstrip("/").lower() == f"{parts.scheme}://{parts.netloc}".lower():
            return True
    return origin.split("://", 1)[-1].rstrip("/").lower() == host.lower()


class LoginLimiter:
    """Failed login attempts per client address in a sliding minute; past the limit, 429.
    In memory: one server process holds the board, and a restart forgetting counts is harmless."""

    def __init__(self, per_minute: int, window_s: float = 60.0) -> None:
        self.per_minute, self.window_s = per_minute, window_s
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, client: str, now: float) -> deque[float]:
        times = self._failures.setdefault(client, deque())
        while times and times[0] <= now - self.window_s:
            times.popleft()
        return times

    def retry_after(self, client: str) -> int:
        """Seconds until this client may try again (0: it may now)."""
        now = time.monotonic()
        with self._lock:
            times = self._recent(client, now)
            if len(times) < self.per_minute:
                return 0
            return max(1, int(times[0] + self.window_s - now) + 1)

    def failed(self, client: str) -> None:
        with self._lock:
            now = time.monotonic()
            self._recent(client, now).append(now)
            if len(self._failures) > 10_000:  # bound memory under a spray of addresses
                for key in [k for k, v in self._failures.items() if not v][:5_000]:
                    del self._failures[key]
