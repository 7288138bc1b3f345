"""In Chromium against a real `campaign serve`: the compare page gives each row its verdict with the ratio's
interval, names why a trial on another stack is not compared, compares it across stacks when asked, and
offers "Settle A vs B" for two approaches."""

from __future__ import annotations

import re

import numpy as np
import pytest

from app.db import make_engine, session_scope
from app.domain.logins import create_login_token
from tests.support.verdicts import NEW_TORCH, OLD_STACK, approach, end_trial, runner, seed

pytestmark = pytest.mark.browser


def _latency(center: float, seed: int) -> list[dict]:
    samples = [float(x) for x in np.random.default_rng(seed).normal(center, center * 0.01, 20)]
    return [
        {
            "name": "allreduce_latency_us",
            "value": float(np.median(samples)),
            "unit": "us",
            "tags": {"tokens": 4, "p10_us": min(samples), "max_us": max(samples)},
            "samples": samples,
        }
    ]


@pytest.fixture
def server(live_server):
    """Campaign `st`: NCCL (four repeats that give node-a's run-to-run spread, then a trial at 10 us) and symm-mem (9.5 us) on one stack, symm-mem again on newer torch."""
    engine = make_engine(live_server.env["CAMPAIGN_DATABASE_URL"])
    try:
        seed(engine, {"key": "nccl", "title": "NCCL"}, {"key": "symm", "title": "symm-mem"}, slug="st")
        with session_scope(engine) as s:
            node, newer = runner(s, "node-a", OLD_STACK), runner(s, "node-b", NEW_TORCH, connected=False)
            nccl, symm = approach(s, "nccl", "st"), approach(s, "symm", "st")
            for n in range(4):  # earlier repeats: a spread reads only trials that ended before the compared ones
                end_trial(s, nccl, node, metrics=_latency(10.0 * (1 + 0.004 * n), 10 + n))
            live_server.trials = [
                end_trial(s, nccl, node, metrics=_latency(10.0, 1)).id,
                end_trial(s, symm, node, metrics=_latency(9.5, 2)).id,
                end_trial(s, symm, newer, metrics=_latency(9.0, 3)).id,
            ]
            token = create_login_token(s, 3600)
    finally:
        engine.dispose()
    live_server.login = f"{live_server.url}/login?token={token}&next=/campaigns/st"
    return live_server


def test_a_row_shows_its_verdict_and_interval(server, browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(server.login)
        page.wait_for_url("**/campaigns/st")
        nccl, symm, newer = server.trials
        page.goto(f"{server.url}/campaigns/st/compare?trial={nccl}&trial={symm}")
        cell = page.locator("#compare-values tr[data-point='tokens=4'] td.verdict-cell")
        cell.wait_for()
        assert cell.get_attribute("data-verdict") == "faster"
        text = cell.inner_text()
        found = re.search(r"×(0\.9\d\d) \[(0\.9\d\d), (0\.9\d\d)\]", text)
        assert found, text
        value, low, high = map(float, found.groups())
        assert low <= value <= high < 1
        # One trial a side: decided only through the runner's run-to-run spread, which the row names.
        assert "run-to-run spread" in text and "from 4 earlier trials of NCCL on this runner" in text
        values = page.locator("#compare-values tr[data-point='tokens=4']").inner_text()
        assert "n=20" in values and "CV" in values and "unstable" not in values
        # Two approaches: Settle is offered.
        assert page.locator("#settle-form button").inner_text() == "Settle nccl vs symm"

        # The trial on newer torch: not compared until asked, then compared with the difference named.
        page.goto(f"{server.url}/campaigns/st/compare?trial={nccl}&trial={newer}")
        cell = page.locator("#compare-values tr[data-point='tokens=4'] td.verdict-cell")
        assert cell.get_attribute("data-verdict") == "none"
        assert "different stack: torch 2.10.0+cu128 -> 2.11.0" in cell.inner_text()
        page.get_by_role("link", name="Compare across stacks").click()
        page.wait_for_url("**across_stacks=true")
        cell = page.locator("#compare-values tr[data-point='tokens=4'] td.verdict-cell")
        # Compared now, but no spread is known on node-b's stack: no verdict, and Repeat is the way on.
        assert (
            cell.get_attribute("data-verdict") == "no_verdict" and "≠ torch 2.10.0+cu128 -> 2.11.0" in cell.inner_text()
        )
        assert "no difference can be claimed" in cell.inner_text()
    finally:
        context.close()
    assert errors == []
