"""In Chromium, against a real `campaign serve` with its embedded runner: the campaign page's Replays panel
starts "Replay on" the embedded runner, whose Python differs from the one two verdicts were reached on; the
report page opens with the first trial running and the second queued, and (never reloaded) follows the
page feed as they end: each row's trial state, then the replay finished. A replay on the same stack says
why nothing was queued, in the panel.

The first trial waits for a file the test writes, so "still running" is certain; every wait is a DOM wait."""

from __future__ import annotations

import sys

import pytest
from playwright.sync_api import expect

from app.db import make_engine, session_scope
from app.domain import campaigns
from app.models import ApproachStatus
from tests.support.browser import MARK, NOT_RELOADED, login_context
from tests.support.servers import start_live_server, stop_live_server
from tests.support.trials import command_recipe, seed_campaign

pytestmark = pytest.mark.browser

WAIT_FOR_FILE = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]):\n    time.sleep(0.05)\nprint('released')"
OLD_PYTHON = {"python": "3.9.0"}  # the stack the verdicts were reached on: not this machine's Python


def test_a_replay_report_renders_and_follows_its_trials_live(tmp_path, browser):
    db_url = f"sqlite:///{tmp_path / 'e2e.db'}"
    server = start_live_server(tmp_path, db_url)  # with its embedded runner
    engine = make_engine(db_url)
    release = tmp_path / "release"
    contexts = []
    try:
        seed_campaign(
            engine,
            "live",
            [
                {"key": "waits", "title": "Waits for a file", "status": ApproachStatus.dead_end, "reason": "hung",
                 "bound_to": {"components": ["python"]}, "verdict_fingerprint": OLD_PYTHON,
                 "recipe": command_recipe(sys.executable, "-c", WAIT_FOR_FILE, str(release))},
                {"key": "quick", "title": "Quick one", "status": ApproachStatus.deferred, "reason": "old python",
                 "bound_to": {"components": ["python"]}, "verdict_fingerprint": OLD_PYTHON,
                 "recipe": command_recipe(sys.executable, "-c", "print('quick ran')")},
                {"key": "physics", "title": "Physics", "status": ApproachStatus.dead_end, "reason": "PCIe",
                 "recipe": command_recipe(sys.executable, "-c", "print('never')")},
            ],
        )  # fmt: skip
        ctx, page = login_context(browser, server.url, engine)
        contexts = [ctx]
        for _ in range(60):  # the embedded runner connects on its own and reports its stack
            page.goto(f"{server.url}/campaigns/live")
            page.wait_for_selector("#replays")
            if page.locator("#replay-runner option").count():
                break
            page.wait_for_timeout(500)
        page.click("#replay-button")
        page.wait_for_url(f"{server.url}/campaigns/live/replays/*")
        page.wait_for_selector(".page-feed[data-feed=open]")
        page.evaluate(MARK)
        expect(page.locator("#replay-state")).to_have_attribute("data-state", "running")
        rows = page.locator("#replay-rows tbody tr")
        expect(rows).to_have_count(2)  # physics is bound to nothing: not replayed
        expect(rows.nth(0)).to_have_attribute("data-key", "waits")
        expect(rows.nth(1)).to_have_attribute("data-key", "quick")
        expect(rows.nth(0)).to_contain_text("re-test: Python 3.9.0 ->", use_inner_text=True)
        page.wait_for_selector("#replay-row-waits .trial-state[data-state=running]", timeout=30000)
        expect(page.locator("#replay-row-quick .trial-state")).to_have_attribute("data-state", "queued")

        # The first trial ends: the page, never reloaded, follows both trials to their ends.
        release.write_text("go")
        page.wait_for_selector("#replay-row-waits .trial-state[data-state=succeeded]", timeout=30000)
        page.wait_for_selector("#replay-row-quick .trial-state[data-state=succeeded]", timeout=30000)
        page.wait_for_selector("#replay-state[data-state=finished]", timeout=30000)
        expect(page.locator("#replay-row-quick .after")).to_contain_text("awaiting a verdict", use_inner_text=True)
        expect(page.locator("#replay-cancel")).to_have_count(0)
        assert page.evaluate(NOT_RELOADED)

        # The campaign page lists it; a second replay on the same runner queues nothing and says why (the
        # verdicts now wait for a person, so nothing is left to replay).
        page.goto(f"{server.url}/campaigns/live")
        page.wait_for_selector("#replay-list tr[data-state=finished]")
        expect(page.locator("#replay-list tbody tr")).to_have_count(1)
        page.click("#replay-button")
        # The refusal is said next to the form, which the page feed's refresh of the list leaves alone.
        expect(page.locator("#replay-form .field-error")).to_contain_text("nothing to replay on", use_inner_text=True)
        with session_scope(engine, write=False) as s:
            campaign = campaigns.get_campaign(s, "live")
            assert campaigns.get_approach(s, campaign, "waits").pending_trial_id is not None
    except Exception:
        print(server.log.read_text()[-6000:])  # the server's and its runner's side of a failure
        raise
    finally:
        for context in contexts:
            context.close()
        engine.dispose()
        stop_live_server(server)
