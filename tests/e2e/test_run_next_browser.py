"""In Chromium: log in with a login URL, click "Run next candidate" on a campaign whose next
approach runs a short command on the embedded runner of a real `campaign serve`, follow the
trial link, see the lines appear live, then the final status. Every assertion waits for the state it
asserts."""

from __future__ import annotations

import sys

import pytest
from playwright.sync_api import expect

from app.db import make_engine, session_scope
from app.domain.logins import create_login_token
from runners.process import STARTED_PREFIX
from tests.support.servers import start_live_server, stop_live_server
from tests.support.trials import command_recipe, seed_campaign

pytestmark = pytest.mark.browser

# Half the lines, then a wait for a file the test writes: "lines arrive while it still runs" is certain.
SCRIPT = (
    "import os, sys, time\n"
    "for i in range(1, 31):\n"
    "    print(f'\\x1b[32mstep {i:02d}\\x1b[0m <b>not html</b>', flush=True)\n"
    "    while i == 15 and not os.path.exists(sys.argv[1]):\n"
    "        time.sleep(0.05)\n"
)


def test_run_next_candidate_shows_the_log_live(tmp_path, browser):
    db_url = f"sqlite:///{tmp_path / 'e2e.db'}"
    server = start_live_server(tmp_path, db_url)  # with its embedded runner
    engine = make_engine(db_url)
    page = browser.new_page()
    go = tmp_path / "go"
    try:
        seed_campaign(
            engine,
            "live",
            [
                {
                    "key": "steps",
                    "title": "Thirty steps",
                    "recipe": command_recipe(sys.executable, "-c", SCRIPT, str(go)),
                }
            ],
        )
        with session_scope(engine) as session:
            token = create_login_token(session, 600)
        page.goto(f"{server.url}/login?token={token}")
        page.goto(f"{server.url}/campaigns/live")
        # The embedded runner connects on its own; until then the button says why nothing runs.
        # Read each answer from its response: the fragment is swapped in a moment later, and reading
        # #run-next-result right after the response could see the previous answer (a start missed).
        for _ in range(60):
            with page.expect_response(lambda r: r.url.endswith("/run-next")) as answer:
                page.click("#run-next-button")
            said = answer.value.text()
            if "Started" in said:
                page.wait_for_selector("#run-next-result:has-text('Started')")
                break
            assert "no runner is connected" in said
            page.wait_for_timeout(500)
        page.click("#run-next-result a")
        page.wait_for_selector("#log:has-text('step 15')")
        # Lines arrive while the trial still runs (it waits for the file).
        expect(page.locator("[data-live=state] .badge")).to_have_text("running", use_inner_text=True)
        expect(page.locator("#log")).not_to_contain_text("step 16", use_inner_text=True)
        go.write_text("go")
        page.wait_for_selector("[data-live=state] [data-state=succeeded]", timeout=30000)
        page.wait_for_selector("#log:has-text('step 30')")
        text = page.inner_text("#log")
        lines = [line for line in text.splitlines() if line]
        assert lines[0].startswith(STARTED_PREFIX + "started pid ")  # the runner's line, then the trial's
        assert lines[1:] == [f"step {i:02d} <b>not html</b>" for i in range(1, 31)]
        expect(page.locator("#log b")).to_have_count(0)  # text, never HTML
        expect(page.locator("#log span.fg-2")).to_have_count(30)  # the ANSI colour became a class
        expect(page.locator("[data-live=exit]")).to_have_text("0", use_inner_text=True)
    finally:
        page.close()
        engine.dispose()
        stop_live_server(server)
