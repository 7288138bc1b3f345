"""The open streams' credentials, checked together (`AccessWatch`, held by app/state.py): a leaf of the app's
state, which it knows nothing of. app/services/access.py registers streams and says when to check."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import or_
from sqlmodel import Session, col, select

from app.db import Database
from app.models import AuthToken, BrowserSession, User, utcnow

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Watch:
    """One open stream: its credential (kind "session" or "token", and the secret's hash) and how to close it."""

    kind: str
    secret_hash: str
    close: Callable[[], None]


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
