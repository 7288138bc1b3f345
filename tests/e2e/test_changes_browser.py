"""In Chromium against a real `campaign serve`: an open approach page and an open campaign page show a
regression as soon as the server's own change-point pass finds it (pushed over the page feed, no reload):
the change with its stack diff, the series chart with the change point marked, the re-open proposal."""

from __future__ import annotations

import numpy as np
import pytest

from app.db import make_engine, session_scope
from app.domain.logins import create_login_token
from app.domain.runners import mark_connected
from app.models import ApproachStatus
from tests.support.verdicts import NEW_TORCH, OLD_STACK, approach, end_trial, runner, seed

pytestmark = pytest.mark.browser


def _line(value: float, seed_: int) -> list[dict]:
    samples = [float(x) for x in np.random.default_rng(seed_).normal(value, value * 0.01, 10)]
    return [{"name": "allreduce_latency_us", "value": value, "unit": "us", "tags": {"tokens": 8}, "samples": samples}]


def test_open_pages_show_a_regression_when_the_pass_finds_it(live_server, browser):
    engine = make_engine(live_server.env["CAMPAIGN_DATABASE_URL"])
    try:
        seed(engine, {"key": "nccl", "title": "NCCL"}, slug="ch")
        with session_scope(engine) as s:
            token = create_login_token(s, 3600)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        errors: list[str] = []
        approach_page, campaign_page = context.new_page(), context.new_page()
        for page in (approach_page, campaign_page):
            page.on("pageerror", lambda exc: errors.append(str(exc)))
        approach_page.goto(f"{live_server.url}/login?token={token}&next=/campaigns/ch/approaches/nccl")
        approach_page.wait_for_url("**/campaigns/ch/approaches/nccl")
        approach_page.locator("#changes").get_by_text("No change points").wait_for()
        campaign_page.goto(f"{live_server.url}/campaigns/ch")
        campaign_page.locator("#changes").get_by_text("No regressions or improvements").wait_for()

        with session_scope(engine) as s:
            node = runner(s, "node-a", OLD_STACK)
            a = approach(s, "nccl", "ch")
            for i in range(8):
                end_trial(s, a, node, metrics=_line(10.0, i))
            mark_connected(s, node, NEW_TORCH, [])
            for i in range(8):
                end_trial(s, a, node, metrics=_line(10.8, 50 + i))
            a.status = ApproachStatus.adopted
            s.add(a)

        change = approach_page.locator("#changes li.change.slower")
        change.wait_for(timeout=20_000)
        assert "allreduce_latency_us (tokens=8) slower x1.08" in change.inner_text()
        assert "torch 2.10.0+cu128 -> 2.11.0" in change.inner_text()
        approach_page.locator("#chart-changes-1 .main-svg").first.wait_for()
        proposal = approach_page.locator("#changes [data-proposal='reopen']").inner_text()
        assert proposal.startswith("Proposal: Re-open nccl")
        panel = campaign_page.locator("#changes li.change.slower")
        panel.wait_for(timeout=20_000)
        assert panel.inner_text().startswith("nccl: allreduce_latency_us (tokens=8) slower")
        assert errors == []
        context.close()
    finally:
        engine.dispose()
