"""Open browser streams end when their credential does: a page feed (app/api/pagefeed.py) or a live-log
socket (app/api/livelog.py) opened with a session that is then revoked, logged out or expired, or by a
user who is then disabled, or with an API token that is then revoked, is closed.

Every open stream registers its credential (the hash of its session id or API token) and what to do
to close it. One check reads which of the registered credentials are still live, in at most two
queries whatever the number of streams, and closes the others. It runs:
- right after a route commits a change that can end credentials (`recheck_after_commit`: revoke a
  session, log out, disable a user, revoke a token), so those streams close at once;
- every `access_recheck_s` while streams are open, for what another process did (`campaign sessions
  revoke`) and for expiry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import event, or_
from sqlmodel import Session, col, select
from starlette.requests import HTTPConnection

from app.db import Database
from app.deps import bearer_token
from app.domain.credentials import hash_token
from app.models import AuthToken, BrowserSession, User, utcnow
from app.security import SESSION_COOKIE
from app.state import StateOwner, app_state

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Watch:
    """One open stream: its credential (kind "session" or "token", and the secret's hash) and how to close it."""

    kind: str
    secret_hash: str
    close: Callable[[], None]


def credential(conn: HTTPConnection) -> tuple[str, str] | None:
    """The credential an accepted request or socket came with (the one operator_from accepted), or
    None where there is none to lose (login disabled)."""
    app = conn.app
    token = bearer_token(conn)
    if token:
        return "token", hash_token(token)
    if not app_state(app).settings.auth_enabled:
        return None
    cookie = app_state(app).session_signer.read(conn.cookies.get(SESSION_COOKIE))
    if cookie is None or cookie.session_id is None:
        return None
    return "session", hash_token(cookie.session_id)


def _live_hashes(session: Session, sessions: set[str], tokens: set[str]) -> set[str]:
    now = utcnow()
    live: set[str] = set()
    if sessions:
        live.update(
            session.exec(
                select(BrowserSession.session_hash)
                .join(User, col(User.id) == col(BrowserSession.user_id))
                .where(
                    col(BrowserSession.session_hash).in_(sessions),
                    col(BrowserSession.revoked_at).is_(None),
                    col(BrowserSession.expires_at) > now,
                    col(User.disabled_at).is_(None),
                )
            ).all()
        )
    if tokens:
        live.update(
            session.exec(
                select(AuthToken.token_hash)
                .join(User, col(User.id) == col(AuthToken.user_id), isouter=True)
                .where(
                    col(AuthToken.token_hash).in_(tokens),
                    AuthToken.kind == "api",
                    col(AuthToken.revoked_at).is_(None),
                    or_(col(User.id).is_(None), col(User.disabled_at).is_(None)),
                )
            ).all()
        )
    return live


class AccessWatch:
    """The open streams' credentials, checked together."""

    def __init__(self, db: Database, recheck_s: float) -> None:
        self.db = db
        self.recheck_s = recheck_s
        self.watches: set[Watch] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._nudge = asyncio.Event()
        self.closed = 0  # streams closed for a dead credential (tests read it)

    def add(self, cred: tuple[str, str] | None, close: Callable[[], None]) -> Watch | None:
        if cred is None:
            return None
        watch = Watch(cred[0], cred[1], close)
        self.watches.add(watch)
        return watch

    def remove(self, watch: Watch | None) -> None:
        if watch is not None:
            self.watches.discard(watch)

    async def check(self) -> None:
        """Close every stream whose credential is no longer live (on the event loop)."""
        watches = list(self.watches)
        if not watches:
            return
        sessions = {w.secret_hash for w in watches if w.kind == "session"}
        tokens = {w.secret_hash for w in watches if w.kind == "token"}
        live = await self.db.read_in_tx(_live_hashes, sessions, tokens)
        for watch in watches:
            if watch.secret_hash not in live and watch in self.watches:
                self.watches.discard(watch)
                self.closed += 1
                watch.close()

    def nudge(self) -> None:
        """Check now (from any thread): a credential may just have ended."""
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(self._nudge.set)

    async def run(self) -> None:
        self.loop = asyncio.get_running_loop()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._nudge.wait(), self.recheck_s)
            self._nudge.clear()
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("checking open streams' sessions failed")


def watch(app: StateOwner, cred: tuple[str, str] | None, close: Callable[[], None]) -> Watch | None:
    """Register an accepted stream (its `credential(conn)`); pass the result to `unwatch` when it ends."""
    return app_state(app).access_watch.add(cred, close)


def unwatch(app: StateOwner, handle: Watch | None) -> None:
    app_state(app).access_watch.remove(handle)


def recheck_after_commit(session: Session) -> None:
    """Once the request session (app/deps.get_session) commits a change that can end credentials,
    check the open streams at once; nothing outside a request (the CLI: the periodic check)."""
    access: AccessWatch | None = session.info.get("access_watch")
    if access is not None:
        event.listen(session, "after_commit", lambda _s: access.nudge(), once=True)
