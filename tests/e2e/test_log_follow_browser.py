"""Issue 43, item 4, in Chromium against a real `campaign serve` and its embedded runner: "follow" on a
trial page pins the live log to its newest line; scrolling up to read unticks it and the view stays where
the reader put it while lines keep arriving; re-ticking it resumes following (before the fix the view
stayed where it was: it followed only while already at the bottom).

The trial prints a numbered line every 20 ms until the test writes its `go` file, so "still running" and
"lines still arriving" are certain while the test looks."""

from __future__ import annotations

import sys

import pytest
from playwright.sync_api import expect

from app.db import make_engine
from tests.support.browser import login_context, start_next_trial
from tests.support.servers import start_live_server, stop_live_server
from tests.support.trials import command_recipe, seed_campaign

pytestmark = pytest.mark.browser

SCRIPT = """
import os, sys, time
go = sys.argv[1]
for i in range(6000):
    if os.path.exists(go):
        break
    print(f'line {i:05d} of a long log', flush=True)
    time.sleep(0.02)
print('done', flush=True)
"""

AT_END = (
    "() => { const p = document.getElementById('log'); return p.scrollHeight - p.scrollTop - p.clientHeight < 40; }"
)
LINES = "() => document.getElementById('log').textContent.split('\\n').length"


def _more_lines(page, than: int) -> int:
    page.wait_for_function(f"() => ({LINES})() > {than}")
    return page.evaluate(LINES)


def test_retick_follow_resumes_following_the_live_log(tmp_path, browser):
    db_url = f"sqlite:///{tmp_path / 'e2e.db'}"
    server = start_live_server(tmp_path, db_url)
    engine = make_engine(db_url)
    go = tmp_path / "go"
    context = None
    try:
        seed_campaign(
            engine,
            "logs",
            [{"key": "chatty", "title": "Chatty", "recipe": command_recipe(sys.executable, "-c", SCRIPT, str(go))}],
        )
        context, page = login_context(browser, server.url, engine)
        page.goto(f"{server.url}/campaigns/logs")
        start_next_trial(page)
        page.click("#run-next-result a")
        page.wait_for_selector("#log-status[data-live=live]")
        follow = page.locator("#log-follow")
        expect(follow).to_be_checked()
        seen = _more_lines(page, 150)  # more than the box shows: it scrolls
        page.wait_for_function(AT_END)

        # The reader scrolls up: follow unticks itself, and new lines leave the view where it is.
        page.locator("#log").hover()
        page.mouse.wheel(0, -20000)
        expect(follow).not_to_be_checked()
        top = page.evaluate("() => document.getElementById('log').scrollTop")
        seen = _more_lines(page, seen + 30)
        assert page.evaluate("() => document.getElementById('log').scrollTop") == top
        assert not page.evaluate(AT_END)

        # Re-ticked: straight to the newest line, and it stays there as more arrive.
        follow.check()
        page.wait_for_function(AT_END)
        for _ in range(3):
            seen = _more_lines(page, seen + 30)
            page.wait_for_function(AT_END)
            expect(follow).to_be_checked()
    finally:
        go.write_text("go")
        if context is not None:
            context.close()
        stop_live_server(server)
        engine.dispose()
