"""In Chromium against a real `campaign serve`: the charts page's "Checked against the engine" section shows each
prediction beside the measured speedup, the missed ones marked as such and visible, never hidden."""

from __future__ import annotations

import pytest

from tests.support.browser import login_url, on_board
from tests.support.engine_check import SLUG, build_engine_check_campaign

pytestmark = pytest.mark.browser


@pytest.fixture
def server(live_server):
    on_board(live_server, build_engine_check_campaign)
    live_server.login = login_url(live_server, f"/campaigns/{SLUG}/charts")
    return live_server


def test_the_engine_check_shows_held_and_missed_predictions(server, browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(server.login)
        page.wait_for_url(f"**/campaigns/{SLUG}/charts")
        section = page.locator("#engine-check")
        section.scroll_into_view_if_needed()
        assert section.is_visible()
        rows = page.locator('#engine-check tr[data-cell="4,3"]')
        assert rows.count() == 3
        marks = {
            rows.nth(i).get_attribute("data-prediction"): rows.nth(i).locator("[data-verdict]").inner_text()
            for i in range(3)
        }
        assert marks == {
            "engine's counting": "held (off by +0.8%)",
            "stand-in compute": "missed by -46.2%",
            "stand-in + engine overhead": "missed by +15.2%",
        }
        missed = page.locator('#engine-check tr[data-held="missed"] [data-verdict] b.bad')
        assert missed.count() >= 2 and all(missed.nth(i).is_visible() for i in range(missed.count()))
        assert "1.550" in page.locator('#engine-check tr[data-cell="4,3"] [data-measured]').inner_text()
        assert "8.000 ms" in page.locator("#engine-check [data-overheads]").inner_text()
        assert errors == []
    finally:
        context.close()
