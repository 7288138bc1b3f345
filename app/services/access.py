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

import logging
from collections.abc import Callable

from sqlalchemy import event
from sqlmodel import Session
from starlette.requests import HTTPConnection

from app.deps import bearer_token
from app.domain.credentials import hash_token
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


def recheck_after_commit(session: Session) -> None:
    """Once the request session (app/deps.get_session) commits a change that can end credentials,
    check the open streams at once; nothing outside a request (the CLI: the periodic check)."""
    access: AccessWatch | None = session.info.get("access_watch")
    if access is not None:
        event.listen(session, "after_commit", lambda _s: access.nudge(), once=True)
