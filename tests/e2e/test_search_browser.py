"""Issue 45 item 3, in Chromium against a real `campaign serve` with its embedded runner: a trial prints a line
with markup; within seconds of its end the navigation's search box finds that line, shows it escaped with the
words marked, and its link opens the log chunk at that line."""

from __future__ import annotations

import re
import sys
import time

import httpx
import pytest
from playwright.sync_api import expect

from app.db import make_engine
from tests.support.browser import login_context
from tests.support.servers import start_live_server, stop_live_server
from tests.support.trials import command_recipe, seed_campaign

pytestmark = pytest.mark.browser

# The line is built when it runs: the runner's first log line echoes the whole command (issue 45 item 6), so a
# literal "KeyError: 12" in the program would be a second log hit, on that line.
PROGRAM = "print('warming up'); print('<img src=x onerror=alert(1)> KeyError: ' + str(3 * 4)); print('bye')"


def test_the_nav_box_finds_a_log_line_and_opens_it(tmp_path, browser):
    db_url = f"sqlite:///{tmp_path / 'search.db'}"
    server = start_live_server(tmp_path, db_url)  # with the embedded runner
    engine = make_engine(db_url)
    context = None
    try:
        recipe = command_recipe(sys.executable, "-c", PROGRAM)
        seed_campaign(engine, "spec", [{"key": "alpha", "title": "Alpha", "recipe": recipe, "evidence": "halves it"}])
        api = {"Authorization": "Bearer " + server.cli("token", "create", "ops").stdout.strip()}
        deadline = time.monotonic() + 60
        while True:
            r = httpx.post(f"{server.url}/api/campaigns/spec/approaches/alpha/run", headers=api).json()
            if r["started"] or r["queued"]:
                break
            assert time.monotonic() < deadline, r
            time.sleep(0.3)
        trial = r["trial_id"]
        while httpx.get(f"{server.url}/api/trials/{trial}", headers=api).json()["state"] not in ("succeeded", "failed"):
            assert time.monotonic() < deadline + 60
            time.sleep(0.3)
        ended = time.monotonic()
        while not httpx.get(f"{server.url}/api/search", params={"q": "KeyError 12"}, headers=api).json():
            assert time.monotonic() - ended < 20, "the log line was not searchable within 20 s of its trial's end"
            time.sleep(0.25)
        context, page = login_context(browser, server.url, engine)
        page.on("dialog", lambda d: pytest.fail(f"log text ran as markup: {d.message}"))
        page.goto(f"{server.url}/campaigns/spec")
        page.fill("nav .nav-search input[name=q]", "KeyError: 12")
        page.press("nav .nav-search input[name=q]", "Enter")
        page.wait_for_url("**/search?q=KeyError*")
        hit = page.locator(".search-hits li[data-kind=log]")
        expect(hit).to_have_count(1)
        assert hit.locator("mark").all_inner_texts() == ["KeyError", "12"]
        assert "<img src=x onerror=alert(1)>" in hit.locator(".snippet").inner_text()  # shown as text
        assert page.locator(".search-hits img").count() == 0
        # The link names the chunk and the line in it: which line depends on how the runner cut the log into
        # chunks (its echo of the command may share the program's chunk), so it is read from the link.
        href = hit.locator("a").get_attribute("href") or ""
        found = re.fullmatch(rf"/trials/{trial}/log/\d+\?q=[^#]+#(L\d+)", href)
        assert found, href
        hit.locator("a").click()
        page.wait_for_url(re.compile(rf"/trials/{trial}/log/\d+\?q=[^#]+#{found.group(1)}$"))
        line = page.locator(f"#{found.group(1)}")
        expect(line).to_contain_text("KeyError: 12")
        assert line.locator("mark").count() == 2 and page.locator("pre.log-chunk img").count() == 0
        page.goto(f"{server.url}/search?q=halves")
        expect(page.locator(".search-hits li[data-kind=approach] a")).to_have_attribute(
            "href", "/campaigns/spec/approaches/alpha#field-evidence"
        )
    finally:
        if context is not None:
            context.close()
        engine.dispose()
        stop_live_server(server)
