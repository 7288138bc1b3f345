"""The web side of who may do what: the session cookie's signer, CSRF and Origin checks, the login limiter.

The browser holds a signed cookie naming a server-side session (its rows, login links, API tokens and
invites: app/domain/logins.py) plus a per-session CSRF token. Scripts use `Authorization: Bearer <token>`
(API tokens are not ambient credentials, so they need no CSRF token). With login disabled the browser still
needs a CSRF token (one per server, see `local_csrf_token`) and a same-origin Origin, so a cross-site page
cannot drive the board. See docs/security.md.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import deque
from urllib.parse import urlsplit

from itsdangerous import BadSignature, URLSafeTimedSerializer

from app.domain.logins import Operator

SESSION_COOKIE = "cb_session"
CSRF_HEADER = "X-CSRF-Token"
CSRF_FORM_FIELD = "csrf_token"


class SessionSigner:
    """The session cookie: signed {session id, CSRF token}. Signature and age are checked here;
    whether the session is still live is the database's answer (`logins.session_is_live`)."""

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
