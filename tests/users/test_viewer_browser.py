"""In Chromium and over the API, against a real server with its embedded runner: a viewer follows a
running trial's live log, finds no write control on the pages, and is refused every change: a
control forced back into the page gets the server's 403 in the flash, and the viewer's API token
gets 403 from every unsafe route of the app. When an admin revokes the viewer's session, the open
trial page's live log and page feed end at once."""

from __future__ import annotations

import sys
import time

import httpx
import pytest
from playwright.sync_api import expect
from sqlmodel import select

from app.config import Settings
from app.db import make_engine, session_scope
from app.deps import VIEWER_REFUSED
from app.domain import users
from app.domain.logins import create_api_token, create_login_token
from app.models import Role, Trial
from app.state import app_state
from tests.support.routes import fill, unsafe_routes
from tests.support.servers import start_live_server, stop_live_server
from tests.support.trials import command_recipe, seed_campaign

pytestmark = pytest.mark.browser

SCRIPT = """
import os, sys, time
go = sys.argv[1]
print('first line for everyone', flush=True)
for _ in range(600):
    if os.path.exists(go):
        break
    time.sleep(0.1)
print('last line after go', flush=True)
"""


def test_a_viewer_follows_a_live_log_and_is_refused_every_change(tmp_path, browser):
    db_url = f"sqlite:///{tmp_path / 'viewer.db'}"
    server = start_live_server(tmp_path, db_url)  # with its embedded runner
    engine = make_engine(db_url)
    go = tmp_path / "go"
    context = browser.new_context()
    page = context.new_page()
    try:
        seed_campaign(
            engine,
            "live",
            [{"key": "wait", "title": "Waits for go", "recipe": command_recipe(sys.executable, "-c", SCRIPT, str(go))}],
        )
        with session_scope(engine) as session:
            viewer = users.create_user(session, "Vera", Role.viewer)
            viewer_link = create_login_token(session, 600, viewer)
            viewer_token = create_api_token(session, "vera-script", viewer)
            admin_token = create_api_token(session, "admin-script")
        admin = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {admin_token}"}, timeout=30)
        deadline = time.monotonic() + 60
        while True:  # the embedded runner connects a moment after the server is up
            started = admin.post("/api/campaigns/live/run-next").json()
            if started["started"] or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert started["started"], started
        trial = started["trial_id"]

        page.goto(f"{server.url}/login?token={viewer_link}")
        page.goto(f"{server.url}/trials/{trial}")
        page.wait_for_selector("#log:has-text('first line for everyone')")
        assert "Vera" in page.inner_text(".whoami") and page.locator(".viewer-banner").is_visible()
        assert page.locator("#cancel-trial").is_hidden()
        # Forced back into view, a control's request is refused by the server, said in the flash.
        page.evaluate("() => { document.body.dataset.role = 'operator'; }")
        page.once("dialog", lambda dialog: dialog.accept())  # "Stop this trial?"
        with page.expect_response(lambda r: r.url.endswith("/cancel")) as answer:
            page.click("#cancel-trial")
        assert answer.value.status == 403
        page.wait_for_selector("#flash:has-text('you can look, not change')")
        assert admin.get(f"/api/trials/{trial}").json()["state"] == "running"
        go.write_text("go")
        page.wait_for_selector("#log:has-text('last line after go')", timeout=30000)  # live, no reload
        page.wait_for_selector("[data-live=state] [data-state=succeeded]", timeout=30000)
        # The verdict box turns to the proposal by itself; its decide form is not the viewer's to see.
        page.evaluate("() => { document.body.dataset.role = 'viewer'; }")  # as the server drew it
        page.wait_for_selector("#verdict-box[data-verdict=pending]", timeout=30000)
        assert page.locator("#verdict-box form").count() == 1 and page.locator("#verdict-box form").is_hidden()

        # An admin revokes Vera's session: her open trial page loses its live log and page feed at once.
        page.wait_for_selector(".page-feed[data-feed=open]")
        (row,) = [s for s in admin.get("/api/sessions").json() if s["user_name"] == "Vera"]
        assert admin.delete(f"/api/sessions/{row['id']}").status_code == 204
        page.wait_for_selector("#log-status[data-live=ended-session]", timeout=15000)
        expect(page.locator("#log-status")).to_have_text("log in again to follow the log", use_inner_text=True)
        page.wait_for_selector(".page-feed[data-feed=ended]", timeout=15000)  # closed for good, not retried
        expect(page.locator("#flash")).to_contain_text("log in again", use_inner_text=True)
        with session_scope(engine) as session:
            viewer_link = create_login_token(session, 600, users.user_by_name(session, "Vera"))
        page.goto(f"{server.url}/login?token={viewer_link}")

        # The campaign, approach and runners pages: no write control is shown. A viewer's own forms say so
        # (data-viewer-ok): log out, and the Watch button, which fills their inbox and changes nothing else.
        for path in ("/campaigns/live/approaches/wait", "/runners", "/campaigns/live"):
            page.goto(server.url + path)
            writes = page.locator(
                ":is(form[method=post], [hx-post], [hx-delete], details.edit):visible:not([data-viewer-ok])"
            )
            assert writes.count() == 0, path
            own = page.locator(":is(form[method=post], [hx-post]):visible[data-viewer-ok]")
            assert {f.get_attribute("action") or f.get_attribute("hx-post") for f in own.all()} <= {
                "/logout",
                "/campaigns/live/watch",
                "/campaigns/live/approaches/wait/watch",
            }, path
        assert page.locator("#run-next-button").is_hidden()
        # A form forced back into view: the refusal shows in the form, and nothing runs.
        page.evaluate("() => { document.body.dataset.role = 'operator'; }")
        with page.expect_response(lambda r: r.url.endswith("/run-next")) as answer:
            page.click("#run-next-button")
        assert answer.value.status == 403
        page.wait_for_selector("#run-next .field-error:has-text('you can look, not change')")
        with session_scope(engine) as session:
            assert len(session.exec(select(Trial)).all()) == 1

        # The API: every unsafe route of the app refuses the viewer's token with 403.
        routes_app = _routes_app(tmp_path, db_url)
        with httpx.Client(
            base_url=server.url,
            headers={"Authorization": f"Bearer {viewer_token}", "accept": "application/json"},
            timeout=30,
        ) as api:
            routes = unsafe_routes(routes_app)
            assert len(routes) >= 25
            for method, path in routes:
                r = api.request(method, fill(path), json={})
                assert r.status_code == 403 and r.json()["detail"] == VIEWER_REFUSED, (method, path, r.text[:200])
            assert api.get(f"/api/trials/{trial}").json()["state"] == "succeeded"  # reading is fine
        admin.close()
    finally:
        context.close()
        engine.dispose()
        stop_live_server(server)


def _routes_app(tmp_path, db_url):
    """The app's routes as the server has them (the same code; built here only to list them)."""
    from app.main import create_app

    settings = Settings(data_dir=tmp_path / "routes", database_url=db_url, embedded_runner=False, secret_key="x" * 40)
    app = create_app(settings, run_migrations=False)
    app_state(app).engine.dispose()
    return app
