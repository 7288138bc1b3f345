"""Open browser streams end when their credential does: a page feed (app/api/pagefeed.py) or a live-log
socket (app/api/livelog.py) opened with a session that is then revoked, logged out or expired, or by a
user who is then disabled, or with an API token that is then revoked, is closed.

Every open stream registers its credential (the hash of its session id or API token) and what to do
to close it. One check reads which of the registered credentials are still live, in at most two
queries whatever the number of streams, and closes the others. It runs:
- right after a transaction that ended credentials commits (revoke a session, log out, disable a user,
  revoke a token: the domain marks its session, `CREDENTIALS_ENDED`), so those streams close at once,
  whichever route or service made the change;
- every `access_recheck_s` while streams are open, for what another process did (`campaign sessions
  revoke`) and for expiry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy import event
from sqlmodel import Session
from starlette.requests import HTTPConnection

from app.deps import bearer_token
from app.domain.credentials import CREDENTIALS_ENDED, hash_token
from app.security import SESSION_COOKIE
from app.services.access_watch import AccessWatch, Watch
from app.state import StateOwner, app_state

log = logging.getLogger(__name__)


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


def watch(app: StateOwner, cred: tuple[str, str] | None, close: Callable[[], None]) -> Watch | None:
    """Register an accepted stream (its `credential(conn)`); pass the result to `unwatch` when it ends."""
    return app_state(app).access_watch.add(cred, close)


def unwatch(app: StateOwner, handle: Watch | None) -> None:
    app_state(app).access_watch.remove(handle)


@event.listens_for(Session, "after_commit")
def _credentials_committed(session: Session) -> None:
    """Once a transaction that ended credentials commits, check the open streams at once; nothing for a
    session outside the board's Database (the CLI: the periodic check)."""
    if session.in_nested_transaction():
        return  # a savepoint's commit: the transaction itself has not committed yet
    ended = session.info.pop(CREDENTIALS_ENDED, False)
    access: AccessWatch | None = session.info.get("access_watch")
    if ended and access is not None:
        access.nudge()


@event.listens_for(Session, "after_soft_rollback")
def _credentials_rolled_back(session: Session, previous_transaction: Any) -> None:
    if previous_transaction.parent is None:  # the whole transaction, not a savepoint inside it
        session.info.pop(CREDENTIALS_ENDED, None)
