"""In Chromium: "Run this approach" on an approach page starts that approach (not the campaign's next
candidate) on the embedded runner of a real `campaign serve`; the trial runs to its end."""

from __future__ import annotations

import sys

import pytest
from playwright.sync_api import expect

from app.db import make_engine, session_scope
from app.domain.logins import create_login_token
from tests.support.servers import start_live_server, stop_live_server

pytestmark = pytest.mark.browser


def test_run_this_approach_from_its_page(tmp_path, browser):
    from tests.support.trials import command_recipe, seed_campaign

    db_url = f"sqlite:///{tmp_path / 'e2e.db'}"
    server = start_live_server(tmp_path, db_url)  # with its embedded runner
    engine = make_engine(db_url)
    page = browser.new_page()
    try:
        seed_campaign(
            engine,
            "live",
            [
                {
                    "key": "first",
                    "title": "First in line",
                    "recipe": command_recipe(sys.executable, "-c", "print('first')"),
                },
                {
                    "key": "chosen",
                    "title": "The chosen one",
                    "recipe": command_recipe(sys.executable, "-c", "print('chosen ran')"),
                },
            ],
        )
        with session_scope(engine) as session:
            token = create_login_token(session, 600)
        page.goto(f"{server.url}/login?token={token}")
        page.goto(f"{server.url}/campaigns/live/approaches/chosen")
        for _ in range(60):  # the embedded runner connects on its own; until then the reason shows
            # Read each answer from its response: the fragment is swapped in a moment later, and reading
            # #run-this-result right after the response could see the previous answer (a start missed).
            with page.expect_response(lambda r: r.url.endswith("/approaches/chosen/run")) as answer:
                page.click("#run-this-button")
            said = answer.value.text()
            if "Started" in said:
                page.wait_for_selector("#run-this-result:has-text('Started')")
                break
            assert "Cannot run it now: no runner is connected." in said
            page.wait_for_timeout(500)
        expect(page.locator("header.topbar")).to_have_count(1)
        page.click("#run-this-result a")
        page.wait_for_selector("[data-live=state] [data-state=succeeded]", timeout=30000)
        page.wait_for_selector("#log:has-text('chosen ran')")
        page.goto(f"{server.url}/campaigns/live")
        expect(page.locator("#approach-first .badge")).to_have_text("untested", use_inner_text=True)
    finally:
        page.close()
        engine.dispose()
        stop_live_server(server)
