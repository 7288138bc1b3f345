"""In Chromium, against a real `campaign serve` with its embedded runner: while the runner is busy, "Run next
candidate" queues the next candidates; the queue appears on a viewer's open campaign page (a second browser
context, never reloaded) with no Cancel button there; the operator cancels one from the queue and it leaves
the viewer's page; when the runner frees up the other queued trial starts, and the queue disappears.

The first trial waits for a file the test writes, so "still running" is certain; every wait is a DOM wait."""

from __future__ import annotations

import sys

import pytest
from playwright.sync_api import expect

from app.db import make_engine
from app.domain.runners import EMBEDDED_RUNNER_NAME
from app.models import Role
from tests.support.browser import MARK, NOT_RELOADED, login_context
from tests.support.servers import start_live_server, stop_live_server
from tests.support.trials import command_recipe, seed_campaign

pytestmark = pytest.mark.browser

WAIT_FOR_FILE = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]):\n    time.sleep(0.05)\nprint('released')"


def _login(browser, server, engine, user: str | None = None):
    """The admin, or the viewer `user`."""
    return login_context(browser, server.url, engine, user, Role.viewer)


def _run_next(page) -> str:
    with page.expect_response(lambda r: r.url.endswith("/run-next")) as answer:
        page.click("#run-next-button")
    return answer.value.text()


def test_a_queued_trial_shows_on_another_open_page_and_starts_when_the_runner_frees(tmp_path, browser):
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
                {
                    "key": "long",
                    "title": "Long one",
                    "recipe": command_recipe(sys.executable, "-c", WAIT_FOR_FILE, str(release)),
                },
                {
                    "key": "next",
                    "title": "Next in line",
                    "recipe": command_recipe(sys.executable, "-c", "print('next ran')"),
                },
                {"key": "later", "title": "Later", "recipe": command_recipe(sys.executable, "-c", "print('later')")},
            ],
        )
        ctx_op, operator = _login(browser, server, engine)
        ctx_view, viewer = _login(browser, server, engine, user="Vic")
        contexts = [ctx_op, ctx_view]

        viewer.goto(f"{server.url}/campaigns/live")
        viewer.wait_for_selector(".page-feed[data-feed=open]")
        viewer.evaluate(MARK)
        expect(viewer.locator("#queue tr")).to_have_count(0)

        operator.goto(f"{server.url}/campaigns/live")
        for _ in range(60):  # the embedded runner connects on its own
            said = _run_next(operator)
            if "Started" in said:
                break
            assert "no runner is connected" in said
            operator.wait_for_timeout(500)
        operator.wait_for_selector("#run-next-result:has-text('Started')")
        operator.wait_for_selector("#recent-trials [data-state=running]", timeout=30000)

        # The runner is busy: two more clicks queue the next two candidates.
        assert "Queued" in _run_next(operator)
        assert "Queued" in _run_next(operator)
        operator.wait_for_selector("#run-next-result:has-text('waits in the queue for a free runner')")

        # The viewer's page, untouched: both appear in the queue in priority order, with no Cancel button.
        viewer.wait_for_selector("#queue tbody tr:nth-child(2)")
        rows = viewer.locator("#queue tbody tr")
        expect(rows.nth(0)).to_have_attribute("data-approach", "next")
        expect(rows.nth(1)).to_have_attribute("data-approach", "later")
        expect(rows.nth(0)).to_contain_text("Next in line", use_inner_text=True)
        expect(rows.nth(0)).to_contain_text("admin", use_inner_text=True)
        expect(viewer.locator("#queue button.queue-cancel").first).to_be_hidden()
        # The inventory is another fragment, swapped on the same notice but on its own.
        expect(viewer.locator("#approach-next")).to_have_attribute("data-activity", "queued")
        expect(viewer.locator("#approach-next")).to_have_attribute("data-status", "untested")

        # The operator cancels "later" from the queue; it leaves the viewer's page.
        # It asks first, as cancelling a running trial does (a queued trial's cancel is just as final).
        operator.wait_for_selector("#queue tr[data-approach=later] button.queue-cancel")
        asked: list[str] = []

        def dismiss(dialog) -> None:
            asked.append(dialog.message)
            dialog.dismiss()

        operator.once("dialog", dismiss)
        operator.click("#queue tr[data-approach=later] button.queue-cancel")
        assert asked and "Cancel queued trial" in asked[0], asked
        assert operator.locator("#queue tr[data-approach=later]").count() == 1  # dismissed: still queued
        operator.once("dialog", lambda dialog: dialog.accept())
        operator.click("#queue tr[data-approach=later] button.queue-cancel")
        viewer.wait_for_selector("#queue tr[data-approach=later]", state="detached")
        viewer.wait_for_selector("#approach-later[data-status=untested]:not([data-activity])")
        expect(viewer.locator("#queue tbody tr")).to_have_count(1)

        # The viewer opens the queued trial's page: no runner yet.
        viewer.click("#queue tr[data-approach=next] a[href^='/trials/']")
        viewer.wait_for_selector("[data-live=state] [data-state=queued]")
        expect(viewer.locator("[data-live=runner]")).to_have_text("–", use_inner_text=True)
        viewer.evaluate(MARK)

        # The runner frees up: the queued trial starts and runs; its open page names the runner.
        release.write_text("go")
        viewer.wait_for_selector("[data-live=state] [data-state=succeeded]", timeout=30000)
        viewer.wait_for_selector("[data-live=runner]:not(:has-text('–'))")
        expect(viewer.locator("[data-live=runner]")).to_have_text(EMBEDDED_RUNNER_NAME, use_inner_text=True)
        assert viewer.evaluate(NOT_RELOADED)
        viewer.go_back()
        viewer.wait_for_selector(".page-feed[data-feed=open]")
        viewer.evaluate(MARK)

        # The queue has disappeared from the viewer's campaign page.
        viewer.wait_for_selector("#queue tr", state="detached", timeout=30000)
        viewer.wait_for_selector("#approach-next[data-status=untested][data-states~=awaiting]", timeout=30000)
        viewer.wait_for_selector("#approach-long[data-status=untested][data-states~=awaiting]")
        assert viewer.evaluate(NOT_RELOADED)

        operator.goto(f"{server.url}/campaigns/live/approaches/next")
        operator.click("#recent-trials a[href^='/trials/'], .trials a[href^='/trials/']")
        operator.wait_for_selector("[data-live=state] [data-state=succeeded]", timeout=30000)
        operator.wait_for_selector("#log:has-text('next ran')")
    except Exception:
        print(server.log.read_text()[-6000:])  # the server's and its runner's side of a failure
        raise
    finally:
        for context in contexts:
            context.close()
        engine.dispose()
        stop_live_server(server)
