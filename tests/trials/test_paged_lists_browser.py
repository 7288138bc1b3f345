"""In Chromium: an approach's long history and trial list show a page at a time, latest first, and
"more" (htmx) appends the next page in place until there is none."""

import pytest

from app.db import make_engine
from bench.pages_at_scale import build_campaign

pytestmark = pytest.mark.browser


def test_more_loads_every_page_in_order(live_server, browser, tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'live.db'}")
    build_campaign(engine, "big", approaches=1, trials=70, changes_per_trial=2, runners=False)
    engine.dispose()
    page = browser.new_page()
    try:
        page.goto(live_server.login_url)
        page.wait_for_url(live_server.url + "/")
        page.goto(live_server.url + "/campaigns/big/approaches/a0001")
        history = page.locator(_selector("history"))
        trials = page.locator("table.trials tbody tr:not(.more)")
        page.wait_for_selector("table.trials")
        # the history pages at decisions (app/domain/history.py); the bench's are trial events alone, folded
        assert history.count() == 140 and trials.count() == 50
        for kind, rows, total in (("history", history, 140), ("trials", trials, 70)):
            more = page.locator(".history li.more button" if kind == "history" else "table.trials tr.more button")
            while more.count():
                before = rows.count()
                more.first.click()
                page.wait_for_function(f"n => document.querySelectorAll({_selector(kind)!r}).length > n", arg=before)
            assert rows.count() == total, kind
        times = [t.get_attribute("datetime") for t in page.locator(_selector("history")).all()]
        assert times == sorted(times, reverse=True)  # latest first, across pages
        ids = [
            int(t.inner_text().lstrip("#"))
            for t in page.locator("table.trials tbody tr:not(.more) a[href^='/trials/']").all()
        ]
        assert ids == sorted(ids, reverse=True) and len(set(ids)) == 70
    finally:
        page.close()


def _selector(kind: str) -> str:
    return "#verdict .history time" if kind == "history" else "table.trials tbody tr:not(.more)"
