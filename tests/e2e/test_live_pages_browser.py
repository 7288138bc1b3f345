"""In Chromium, against real `campaign serve` processes and real runner processes: pages that update
themselves through the page feed (server-sent events), never reloaded, never polled.

- Two people at once: a trial one starts (Run next) appears, runs and ends on the other's open
  campaign page ("waiting for your verdict" included); the starter's trial page goes from running to
  succeeded, its "live" badge ends, and a small chart per metric grows, then shows the stored values;
  its verdict box turns to the proposal with its decide form, and to "Verdict recorded" when the other
  person confirms the verdict (by API), on both pages.
- A runner's "last seen" moves with its heartbeats (coalesced notices) on an open Runners page, and a
  runner killed with SIGKILL, or hung with SIGSTOP, turns offline there within its lost timeout.
- A page whose feed dropped (the server restarted) catches up with what changed meanwhile.

Trials wait for a file the test writes, so "still running" is certain. Every assertion waits for the
state it asserts (playwright's `expect`, or a wait on that very element): a wait on one fragment says
nothing of another, which the page feed re-fetches on its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

import httpx
import pytest
from playwright.sync_api import expect
from sqlmodel import select

from app.db import make_engine, session_scope
from app.domain import campaigns
from app.models import Approach
from tests.support.browser import MARK, NOT_RELOADED, login_context
from tests.support.paths import ROOT
from tests.support.servers import start_live_server, stop_live_server
from tests.support.trials import command_recipe, new_runner_token, seed_campaign

pytestmark = pytest.mark.browser

SCRIPT = """
import json, os, sys, time
go = sys.argv[1]
def metric(name, value):
    print('@@campaign-metric ' + json.dumps({'name': name, 'value': value, 'unit': 'ms'}), flush=True)
print('@@campaign-phase measuring', flush=True)
for i in range(5):
    metric('step_ms', 10.0 + i)
metric('total_ms', 99.5)
for _ in range(900):
    if os.path.exists(go):
        break
    time.sleep(0.1)
for i in range(3):
    metric('step_ms', 20.0 + i)
print('done', flush=True)
"""


def _login(browser, server, engine, name: str | None = None):
    """The board's admin, or the operator `name` (made if new)."""
    return login_context(browser, server.url, engine, name)


def _plot_points(page, name: str) -> list[float]:
    return page.evaluate(
        "(name) => { const d = document.querySelector('.metric-plot[data-metric=\"' + name + '\"]');"
        " return d && d.data ? Array.from(d.data[0].y) : []; }",
        name,
    )


def _wait_points(page, name: str, count: int) -> list[float]:
    """The points of the chart of metric `name`, once it has `count` of them."""
    page.wait_for_function(
        "([name, count]) => { const d = document.querySelector('.metric-plot[data-metric=\"' + name + '\"]');"
        " return d && d.data && d.data[0].y.length === count; }",
        arg=[name, count],
    )
    return _plot_points(page, name)


def test_a_trial_started_by_one_person_runs_and_ends_on_anothers_open_pages(tmp_path, browser):
    db_url = f"sqlite:///{tmp_path / 'e2e.db'}"
    server = start_live_server(tmp_path, db_url)  # with its embedded runner
    engine = make_engine(db_url)
    go = tmp_path / "go"
    contexts = []
    try:
        recipe = command_recipe(sys.executable, "-c", SCRIPT, str(go))
        seed_campaign(engine, "live", [{"key": "steps", "title": "Steps", "recipe": recipe}])
        ctx_a, starter = _login(browser, server, engine, "ada")
        ctx_b, watcher = _login(browser, server, engine, "bob")
        contexts = [ctx_a, ctx_b]

        watcher.goto(f"{server.url}/campaigns/live")
        watcher.wait_for_selector(".page-feed[data-feed=open]")
        watcher.evaluate(MARK)
        expect(watcher.locator("#approach-steps")).to_have_attribute("data-status", "untested")
        expect(watcher.locator("#recent-trials")).to_contain_text(
            "No trials yet", use_inner_text=True
        )  # its own request, on load

        starter.goto(f"{server.url}/campaigns/live")
        for _ in range(60):  # the embedded runner connects on its own
            with starter.expect_response(lambda r: r.url.endswith("/run-next")) as answer:
                starter.click("#run-next-button")
            said = answer.value.text()
            if "Started" in said:
                break
            assert "no runner is connected" in said
            starter.wait_for_timeout(500)
        starter.wait_for_selector("#run-next-result:has-text('Started')")
        starter.click("#run-next-result a")

        # The other person's campaign page, untouched: the trial appears and runs.
        watcher.wait_for_selector("#recent-trials [data-state=running]", timeout=20000)
        watcher.wait_for_selector("#approach-steps[data-status=untested][data-activity=running]")
        # The starter's trial page: running, "live", a chart per metric name growing with the log.
        starter.wait_for_selector("[data-live=state] [data-state=running]")
        starter.wait_for_selector("#log-status[data-live=live]")
        starter.wait_for_selector("#verdict-box[data-verdict=not-ended]")
        expect(starter.locator("#trial")).to_contain_text("ada", use_inner_text=True)  # requested by the starter
        starter.wait_for_selector(".page-feed[data-feed=open]")
        assert _wait_points(starter, "step_ms", 5) == [10.0, 11.0, 12.0, 13.0, 14.0]
        assert _wait_points(starter, "total_ms", 1) == [99.5]
        expect(starter.locator(".metric-plot")).to_have_count(2)
        # Each chart fits its grid cell (made while the section was hidden, Plotly took 700 px and spilled).
        starter.wait_for_function(
            "() => [...document.querySelectorAll('.metric-plot')].every(d => {"
            " const svg = d.querySelector('.main-svg'); return svg && svg.getBoundingClientRect().width"
            " <= d.getBoundingClientRect().width + 1; })"
        )
        starter.evaluate(MARK)

        go.write_text("go")

        # It ends on both pages without a reload.
        starter.wait_for_selector("[data-live=state] [data-state=succeeded]", timeout=30000)
        starter.wait_for_selector("#log-status[data-live=ended]")
        expect(starter.locator("#log-status")).to_have_text("trial ended", use_inner_text=True)
        # After the end the charts show the stored metrics (the server's #metric-series).
        starter.wait_for_selector("#metric-series", state="attached")
        assert _wait_points(starter, "step_ms", 8) == [10.0, 11.0, 12.0, 13.0, 14.0, 20.0, 21.0, 22.0]
        assert starter.evaluate(NOT_RELOADED)

        watcher.wait_for_selector("#recent-trials [data-state=succeeded]", timeout=30000)
        watcher.wait_for_selector("#campaign-verdicts:has-text('Waiting for your verdict')")
        watcher.wait_for_selector("#approach-steps[data-status=untested][data-states~=awaiting]")
        expect(watcher.locator("#recent-trials [data-state=running]")).to_have_count(0)
        assert watcher.evaluate(NOT_RELOADED)

        # The starter's verdict box: the proposal and its decide form, without a reload.
        starter.wait_for_selector("#verdict-box[data-verdict=pending] form.verdict-form button[type=submit]")
        expect(starter.locator("#verdict-box")).to_contain_text("Proposed", use_inner_text=True)
        # The other person decides (through the API): both pages follow.
        trial_id = int(starter.get_attribute("#trial", "data-trial-id"))
        api = {"Authorization": "Bearer " + server.cli("token", "create", "watcher", "--user", "bob").stdout.strip()}
        r = httpx.post(
            f"{server.url}/api/trials/{trial_id}/verdict",
            json={"status": "promising", "reason": "decided by the watcher", "components": []},
            headers=api,
        )
        assert r.status_code == 200, r.text
        starter.wait_for_selector("#verdict-box[data-verdict=recorded]:has-text('decided by the watcher')")
        expect(starter.locator("#verdict-box form")).to_have_count(0)
        watcher.wait_for_selector("#approach-steps[data-status=promising]")
        # The verdicts list is another fragment, re-fetched on the same notice but swapped on its own.
        expect(watcher.locator("#campaign-verdicts")).not_to_contain_text(
            "Waiting for your verdict", use_inner_text=True
        )
        assert starter.evaluate(NOT_RELOADED) and watcher.evaluate(NOT_RELOADED)
        watcher.goto(f"{server.url}/campaigns/live/approaches/steps")  # the history names who decided
        expect(watcher.locator(".history")).to_contain_text("bob", use_inner_text=True)
        # The trial page (log, metrics, plots, verdict) fits a 390 px phone.
        starter.set_viewport_size({"width": 390, "height": 844})
        starter.wait_for_function("() => document.scrollingElement.scrollWidth <= 390", timeout=5000)
    finally:
        for ctx in contexts:
            ctx.close()
        engine.dispose()
        stop_live_server(server)


@pytest.mark.parametrize(
    "how",
    [
        signal.SIGKILL,  # its process is gone: the socket closes
        signal.SIGSTOP,  # hung: the socket stays open, the heartbeats stop; the lost-runner sweep decides
    ],
    ids=["killed", "hung"],
)
def test_a_killed_runner_turns_offline_on_an_open_runners_page(tmp_path, browser, how):
    lost_after_s = 5.0  # a killed runner drops its socket at once; a stopped one is swept after this
    db_url = f"sqlite:///{tmp_path / 'runners.db'}"
    server = start_live_server(
        tmp_path,
        db_url,
        "--no-runner",
        env={
            "CAMPAIGN_HEARTBEAT_S": "0.5",
            "CAMPAIGN_HEARTBEAT_NOTICE_S": "1",
            "CAMPAIGN_RUNNER_LOST_AFTER_S": str(lost_after_s),
        },
    )
    engine = make_engine(db_url)
    runner = None
    context = None
    try:
        runner_id, token = new_runner_token(engine, "node-to-kill")
        context, page = _login(browser, server, engine)
        page.goto(f"{server.url}/runners")
        page.wait_for_selector(".page-feed[data-feed=open]")
        page.evaluate(MARK)
        row = f"#runner-{runner_id}"
        expect(page.locator(row)).to_have_attribute("data-status", "offline")
        spool = tmp_path / "spool"
        log = open(tmp_path / "runner.log", "w")
        runner = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "runner", "--server", server.url, "--spool-dir", str(spool)],
            cwd=ROOT,
            env={**os.environ, "CAMPAIGN_RUNNER_TOKEN": token, "PYTHONUNBUFFERED": "1"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        page.wait_for_selector(f"{row}[data-status=online]", timeout=30000)  # it connected: the page says so
        # Its heartbeats move "last seen" on the open page (the table re-fetched on a "heartbeats" notice).
        seen = page.get_attribute(f"{row} .last-seen", "data-last-seen")
        page.wait_for_function(
            "([sel, seen]) => { const td = document.querySelector(sel);"
            " return td && td.dataset.lastSeen && td.dataset.lastSeen !== seen; }",
            arg=[f"{row} .last-seen", seen],
            timeout=30000,
        )
        expect(page.locator(row)).to_have_attribute("data-status", "online")
        os.killpg(runner.pid, how)
        if how == signal.SIGKILL:
            runner.wait(timeout=10)
        page.wait_for_selector(f"{row}[data-status=offline]", timeout=int(lost_after_s * 1000) + 3000)
        assert page.evaluate(NOT_RELOADED)
    finally:
        if runner is not None and runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
        if context is not None:
            context.close()
        engine.dispose()
        stop_live_server(server)


def test_a_page_whose_feed_dropped_catches_up_when_it_reconnects(tmp_path, browser):
    """The server restarts (its feeds end, its notices' ids start over) while a change is made: the open
    campaign page reconnects by itself and shows the change."""
    db_url = f"sqlite:///{tmp_path / 'reconnect.db'}"
    server = start_live_server(tmp_path, db_url, "--no-runner")
    engine = make_engine(db_url)
    context = None
    try:
        seed_campaign(engine, "spec", [{"key": "alpha", "title": "Alpha"}, {"key": "beta", "title": "Beta"}])
        context, page = _login(browser, server, engine)
        page.goto(f"{server.url}/campaigns/spec")
        page.wait_for_selector(".page-feed[data-feed=open]")
        page.evaluate(MARK)
        expect(page.locator("#approach-beta")).to_have_attribute("data-status", "untested")

        port = int(server.url.rsplit(":", 1)[1])
        stop_live_server(server)
        assert server.proc.returncode is not None
        with session_scope(engine) as session:  # while the server is down
            beta = session.exec(select(Approach).where(Approach.key == "beta")).one()
            campaigns.change_status(session, beta, "deferred", "waiting for new GPUs " + uuid.uuid4().hex[:4], "test")
        server = start_live_server(
            tmp_path,
            db_url,
            "--no-runner",
            port=port,
            env={"CAMPAIGN_SECRET_KEY": server.env["CAMPAIGN_SECRET_KEY"]},
        )
        page.wait_for_selector("#approach-beta[data-status=deferred]", timeout=60000)
        expect(page.locator("#approach-beta")).to_contain_text("waiting for new GPUs", use_inner_text=True)
        assert page.evaluate(NOT_RELOADED)

        # And live again on the new server: a change made there arrives as a notice.
        page.wait_for_selector(".page-feed[data-feed=open]")
        with session_scope(engine) as session:
            alpha = session.exec(select(Approach).where(Approach.key == "alpha")).one()
        api = server.cli("token", "create", "reconnect").stdout.strip()

        r = httpx.post(
            f"{server.url}/api/campaigns/spec/approaches/{alpha.key}/status",
            json={"status": "promising", "reason": "fast"},
            headers={"Authorization": f"Bearer {api}"},
        )
        assert r.status_code == 200, r.text
        page.wait_for_selector("#approach-alpha[data-status=promising]")
        assert page.evaluate(NOT_RELOADED)
    finally:
        if context is not None:
            context.close()
        engine.dispose()
        stop_live_server(server)


def test_the_approach_page_follows_changes_but_never_under_the_typing_hand(tmp_path, browser):
    """Another person changes the approach's status while this one types a reason in the status form:
    the status block waits while the typed text is there (focused or not), then refreshes once the
    form holds nothing typed and they left it."""
    db_url = f"sqlite:///{tmp_path / 'approach.db'}"
    server = start_live_server(tmp_path, db_url, "--no-runner")
    engine = make_engine(db_url)
    context = None
    try:
        seed_campaign(engine, "spec", [{"key": "alpha", "title": "Alpha"}])
        api = {"Authorization": "Bearer " + server.cli("token", "create", "other").stdout.strip()}
        context, page = _login(browser, server, engine)
        page.goto(f"{server.url}/campaigns/spec/approaches/alpha")
        page.wait_for_selector(".page-feed[data-feed=open]")
        page.evaluate(MARK)
        page.fill("#verdict input[name=reason]", "half-typed reason")

        r = httpx.post(
            f"{server.url}/api/campaigns/spec/approaches/alpha/status",
            json={"status": "deferred", "reason": "decided elsewhere"},
            headers=api,
        )
        assert r.status_code == 200, r.text
        page.wait_for_selector("#verdict[data-feed-stale]", state="attached")  # held, not swapped
        assert page.input_value("#verdict input[name=reason]") == "half-typed reason"
        assert "decided elsewhere" not in page.inner_text("#verdict")

        page.click("h1")  # they leave the field: what they typed is still pending, so it still waits
        page.evaluate("() => new Promise((done) => setTimeout(done, 0))")  # after pagefeed.js's focusout check
        assert page.locator("#verdict[data-feed-stale]").count() == 1  # still held: it did not refresh
        assert page.input_value("#verdict input[name=reason]") == "half-typed reason"
        page.fill("#verdict input[name=reason]", "")
        page.click("h1")  # an empty form, left: the block refreshes
        page.wait_for_selector("#verdict .status-line:has-text('decided elsewhere')")
        page.wait_for_selector("#verdict .history:has-text('decided elsewhere')")
        assert page.evaluate(NOT_RELOADED)
    finally:
        if context is not None:
            context.close()
        engine.dispose()
        stop_live_server(server)
