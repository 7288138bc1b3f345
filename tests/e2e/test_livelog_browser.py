"""In Chromium: a trial prints normal lines, phase lines and metric lines (one split across two writes,
one with HTML in a tag). While it still runs, its metrics become rows of the trial page's metrics table,
the console hides the metric and phase lines until "show raw output" is ticked (kept across a reload),
and the HTML stays text. The trial waits for a file the test writes, so "still running" is certain."""

from __future__ import annotations

import re
import sys

import pytest
from playwright.sync_api import expect

from app.db import make_engine, session_scope
from app.domain.logins import create_login_token
from runners.process import STARTED_PREFIX
from tests.support.browser import login_context, start_next_trial
from tests.support.servers import start_live_server, stop_live_server
from tests.support.trials import command_recipe, seed_campaign

pytestmark = pytest.mark.browser

EVIL = "<img src=x onerror=alert(1)>"

SCRIPT = """
import json, os, sys, time
go = sys.argv[1]
def metric(name, value, unit, **tags):
    return '@@campaign-metric ' + json.dumps({'name': name, 'value': value, 'unit': unit, 'tags': tags})
def out(text):
    sys.stdout.write(text)
    sys.stdout.flush()
out('@@campaign-phase warming up\\n')
out('hello from the recipe\\n')
out(metric('allreduce_latency_us', 12.5, 'us', method='nccl-tests', backend='nccl', bytes=4096) + '\\n')
line = metric('allreduce_busbw_gbps', 3.25, 'GB/s', method='graph-replay', mode='EVIL', tokens=8)
out(line[:20])
time.sleep(0.3)
out(line[20:] + '\\n')
out('@@campaign-phase benchmarking\\n')
out('normal line two\\n')
for _ in range(600):
    if os.path.exists(go):
        break
    time.sleep(0.1)
out('bye\\n')
""".replace("'EVIL'", repr(EVIL))


def test_metric_lines_become_rows_and_leave_the_console(tmp_path, browser):
    db_url = f"sqlite:///{tmp_path / 'e2e.db'}"
    server = start_live_server(tmp_path, db_url)  # with its embedded runner
    engine = make_engine(db_url)
    go = tmp_path / "go"
    page = browser.new_page()
    dialogs: list[str] = []

    def on_dialog(dialog) -> None:  # an alert() would mean log text ran as HTML
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    try:
        recipe = command_recipe(sys.executable, "-c", SCRIPT, str(go))
        seed_campaign(engine, "live", [{"key": "metrics", "title": "Metric lines", "recipe": recipe}])
        with session_scope(engine) as session:
            token = create_login_token(session, 600)
        page.goto(f"{server.url}/login?token={token}")
        page.goto(f"{server.url}/campaigns/live")
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
        page.wait_for_selector("#log:has-text('normal line two')")

        # Rows while the trial still runs: the server's table, fetched again as metric lines arrive (the page
        # builds no cells of its own); the "no metrics" text is gone.
        rows = page.locator("#metrics tbody tr")
        rows.nth(1).wait_for()
        expect(page.locator("[data-live=state] .badge")).to_have_text("running", use_inner_text=True)
        assert not go.exists()
        expect(rows).to_have_count(2)
        expect(page.locator("#metrics")).not_to_contain_text("No metric lines yet", use_inner_text=True)
        headers = page.locator("#metrics thead th").all_text_contents()  # (CSS upper-cases them)
        assert headers[:3] == ["Name", "Value", "Unit"]
        assert {"method", "mode", "backend", "tokens", "bytes"} <= set(headers)

        def row(i: int) -> dict[str, str]:
            return dict(zip(headers, rows.nth(i).locator("td").all_text_contents(), strict=True))

        first, second = row(0), row(1)
        assert (first["Name"], first["Value"], first["Unit"]) == ("allreduce_latency_us", "12.5", "us")
        assert (first["method"], first["backend"], first["bytes"]) == ("nccl-tests", "nccl", "4096")
        assert (second["Name"], second["Value"], second["Unit"]) == ("allreduce_busbw_gbps", "3.25", "GB/s")
        assert (second["method"], second["tokens"]) == ("graph-replay", "8")
        assert second["mode"] == EVIL  # the split line was joined; the tag is text
        expect(page.locator("#metrics img, #log img")).to_have_count(0)
        expect(page.locator("[data-live=phase]")).to_have_text(
            "benchmarking", use_inner_text=True
        )  # the trial's state, not the log
        expect(page.locator("[data-live=elapsed]")).to_have_text(re.compile(r"^(\d+min )?\d+s$"), use_inner_text=True)

        # The console shows only the normal lines by default.
        lines = [line for line in page.inner_text("#log").splitlines() if line]
        assert lines[0].startswith(STARTED_PREFIX + "started pid ")  # the runner's line, then the trial's
        assert lines[1:] == ["hello from the recipe", "normal line two"]
        toggle = page.locator("#log-raw")
        expect(toggle).to_be_visible()
        expect(toggle).not_to_be_checked()
        toggle.check()
        # (The raw lines are in the log either way, hidden until ticked: what shows is its inner text.)
        expect(page.locator("#log")).to_contain_text("@@campaign-phase warming up", use_inner_text=True)
        expect(page.locator("#log")).to_contain_text(EVIL, use_inner_text=True)
        assert page.inner_text("#log").count("@@campaign-metric") == 2  # shown in full, above
        # The choice survives a reload.
        page.reload()
        page.wait_for_selector("#log:has-text('@@campaign-phase benchmarking')")
        expect(page.locator("#log-raw")).to_be_checked()
        page.locator("#log-raw").uncheck()
        expect(page.locator("#log")).not_to_contain_text("@@campaign", use_inner_text=True)

        go.write_text("go")
        page.wait_for_selector("[data-live=state] [data-state=succeeded]", timeout=30000)
        page.wait_for_selector("#log:has-text('bye')")
        # After the end, the same server table: the same rows, the tag still text.
        expect(page.locator("#metrics tbody tr")).to_have_count(2)
        expect(page.locator("#metrics")).to_contain_text(EVIL, use_inner_text=True)
        expect(page.locator("#metrics img, #log img")).to_have_count(0)
        assert dialogs == []
    finally:
        page.close()
        engine.dispose()
        stop_live_server(server)


GATED = """
import json, os, sys, time
more, go = sys.argv[1], sys.argv[2]
def metric(name, value):
    return '@@campaign-metric ' + json.dumps({'name': name, 'value': value, 'unit': 'us', 'tags': {'bytes': 4096}})
def wait(path):
    for _ in range(600):
        if os.path.exists(path):
            return
        time.sleep(0.1)
print(metric('allreduce_latency_us', 12.5), flush=True)
print('first metric out', flush=True)
wait(more)
print(metric('allreduce_in_situ_us', 99.25), flush=True)
wait(go)
"""


def test_a_metric_printed_while_the_page_is_open_shows_as_the_servers_row(tmp_path, browser):
    """The page is open before the second metric line exists: its row can only come from the page fetching
    the server's table again as the line streams in (the page builds no cells of its own)."""
    db_url = f"sqlite:///{tmp_path / 'e2e.db'}"
    server = start_live_server(tmp_path, db_url)
    engine = make_engine(db_url)
    more, go = tmp_path / "more", tmp_path / "go"
    context = None
    try:
        recipe = command_recipe(sys.executable, "-c", GATED, str(more), str(go))
        seed_campaign(engine, "gated", [{"key": "gated", "title": "Gated metrics", "recipe": recipe}])
        context, page = login_context(browser, server.url, engine)
        page.goto(f"{server.url}/campaigns/gated")
        start_next_trial(page)
        page.click("#run-next-result a")
        page.wait_for_selector("#log:has-text('first metric out')")
        rows = page.locator("#metrics tbody tr")
        expect(rows).to_have_count(1)
        with page.expect_response(lambda r: r.url.endswith("/metrics") and r.status == 200):
            more.write_text("more")
        expect(rows).to_have_count(2)
        expect(rows.nth(1)).to_contain_text("allreduce_in_situ_us")
        expect(rows.nth(1).locator("td.num")).to_have_text("99.25")  # the server's "%.4g"
        expect(page.locator("[data-live=state] .badge")).to_have_text("running", use_inner_text=True)
        go.write_text("go")
        page.wait_for_selector("[data-live=state] [data-state=succeeded]", timeout=30000)
        expect(rows).to_have_count(2)
    finally:
        if context is not None:
            context.close()
        engine.dispose()
        stop_live_server(server)
