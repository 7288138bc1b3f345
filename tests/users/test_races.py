"""Races on a real server (uvicorn), on both databases: browsers accepting one invite at once get one
user and one session between them; two admins demoting each other at once leave the board an admin."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

import httpx
import pytest
from sqlmodel import select

from app.db import session_scope
from app.domain.logins import Operator, create_api_token, create_invite
from app.models import BrowserSession, Role, User
from tests.support.servers import ThreadServer
from tests.support.trials import make_settings

pytestmark = pytest.mark.both_databases  # races settled by row locks and unique constraints

BROWSERS = 6


def test_one_invite_accepted_at_once_by_many_makes_one_user(tmp_path, db_url):
    srv = ThreadServer(make_settings(tmp_path, db_url)).start()
    try:
        with session_scope(srv.engine) as session:
            admin = session.exec(select(User)).one()
            _invite, token = create_invite(
                session, Operator(name=admin.name, csrf_token=None, user_id=admin.id), "operator", "", 600
            )
        barrier = Barrier(BROWSERS)

        def accept(i: int) -> int:
            with httpx.Client(base_url=srv.url, timeout=60) as browser:
                barrier.wait()
                return browser.post(f"/invite/{token}", data={"name": f"Racer {i}"}, follow_redirects=False).status_code

        with ThreadPoolExecutor(BROWSERS) as pool:
            codes = sorted(pool.map(accept, range(BROWSERS)))
        assert codes == [303] + [410] * (BROWSERS - 1), codes
        with session_scope(srv.engine) as session:
            names = [u.name for u in session.exec(select(User)).all()]
            assert len(names) == 2 and names[0] == "admin" and names[1].startswith("Racer ")
            assert len(session.exec(select(BrowserSession)).all()) == 1
    finally:
        srv.stop()


def test_two_admins_demoting_each_other_at_once_leave_one_admin(tmp_path, db_url):
    srv = ThreadServer(make_settings(tmp_path, db_url)).start()
    try:
        with session_scope(srv.engine) as session:
            first = session.exec(select(User)).one()
            second = User(name="Ada", role=Role.admin)
            session.add(second)
            session.flush()
            tokens = [create_api_token(session, "a", first), create_api_token(session, "b", second)]
            ids = [first.id, second.id]
        for _round in range(3):
            barrier = Barrier(2)

            def demote(i: int, barrier: Barrier = barrier) -> int:
                headers = {"Authorization": f"Bearer {tokens[i]}"}
                with httpx.Client(base_url=srv.url, headers=headers, timeout=60) as api:
                    barrier.wait()
                    return api.patch(f"/api/users/{ids[1 - i]}", json={"role": "operator"}).status_code

            with ThreadPoolExecutor(2) as pool:
                codes = sorted(pool.map(demote, range(2)))
            with session_scope(srv.engine) as session:
                admins = session.exec(select(User).where(User.role == Role.admin)).all()
                assert len(admins) == 1, (codes, [a.name for a in admins])
                assert codes in ([200, 403], [200, 409]), codes  # the loser: demoted first (403) or last admin (409)
                for user in session.exec(select(User)).all():  # both admins again for the next round
                    user.role = Role.admin
                    session.add(user)
    finally:
        srv.stop()
