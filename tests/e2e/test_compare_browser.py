"""In Chromium against a real `campaign serve` with the fixture campaign: tick two trials on the campaign
page, press "Compare selected", and read the comparison: Plotly's traces (from the chart div) hold both
trials' measured values, the metric menu switches the chart, and the stack diff highlights what differs."""

from __future__ import annotations

import pytest
from sqlmodel import select

from app.db import make_engine, session_scope
from app.models import Approach, Trial
from app.security import create_login_token
from tests.support.charts import H200, SLUG, build_fixture_campaign

pytestmark = pytest.mark.browser


@pytest.fixture
def server(live_server):
    """The live server plus the fixture campaign; the ids of its NCCL eager trial (2x H200, torch 2.11.0)
    and its SGLang custom-allreduce trial (the seed node: RTX PRO 6000, torch 2.10.0+cu128)."""
    engine = make_engine(live_server.env["CAMPAIGN_DATABASE_URL"])
    try:
        with session_scope(engine) as session:
            build_fixture_campaign(session)
            ids = dict(
                session.exec(
                    select(Approach.key, Trial.id)
                    .join(Trial, Trial.approach_id == Approach.id)  # type: ignore[arg-type]
                    .where(Approach.key.in_(["nccl-eager", "custom-allreduce"]))  # type: ignore[attr-defined]
                ).all()
            )
            token = create_login_token(session, 3600)
    finally:
        engine.dispose()
    live_server.eager, live_server.custom = ids["nccl-eager"], ids["custom-allreduce"]
    live_server.login = f"{live_server.url}/login?token={token}&next=/campaigns/{SLUG}"
    return live_server


def _errors(page) -> list[str]:
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on(
        "console",
        lambda msg: (
            errors.append(msg.text)
            if msg.type == "error" and not msg.location.get("url", "").endswith("/favicon.ico")
            else None
        ),
    )
    page.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    return errors


def _traces(page) -> list[dict]:
    return page.evaluate(
        "() => document.getElementById('compare-chart').data.map(t => ({trial: t.meta.trial_id,"
        " metric: t.meta.metric, name: t.name, x: Array.from(t.x), y: Array.from(t.y), visible: t.visible}))"
    )


def test_compare_two_trials_from_the_campaign_page(server, browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors = _errors(page)
    try:
        page.goto(server.login)
        page.wait_for_url(f"**/campaigns/{SLUG}")
        page.wait_for_selector("#recent-trials input[name=trial]")
        compare = page.locator("#recent-trials button.compare-selected")
        page.check(f"#recent-trials input[name=trial][value='{server.eager}']")
        page.check(f"#recent-trials input[name=trial][value='{server.custom}']")
        compare.click()
        page.wait_for_url(f"**/campaigns/{SLUG}/compare?trial=*")
        page.wait_for_function(
            "() => { const d = document.getElementById('compare-chart');"
            " return d && d.data && d.data.length > 0 && d.querySelector('.main-svg'); }"
        )
        traces = _traces(page)
        by = {(t["trial"], t["metric"]): t for t in traces}
        eager = by[(server.eager, "allreduce_latency_us")]
        assert eager["x"] == [1, 8, 64, 256] and eager["y"] == [H200["nccl-eager"][t] for t in (1, 8, 64, 256)]
        custom = by[(server.custom, "output_throughput_tok_s")]
        assert custom["y"] == [38.0] and custom["name"] == f"#{server.custom} SGLang custom allreduce (IPC)"
        assert {t["trial"] for t in traces} == {server.eager, server.custom}

        # The metric menu shows one metric's traces at a time.
        page.click("#compare-chart .updatemenu-header-group")
        page.click("#compare-chart .updatemenu-button >> text=output_throughput_tok_s")
        page.wait_for_function(
            "() => document.getElementById('compare-chart').data"
            ".filter(t => t.visible === true).every(t => t.meta.metric === 'output_throughput_tok_s')"
        )
        shown = [t for t in _traces(page) if t["visible"] is True]
        assert [t["trial"] for t in shown] == [server.eager, server.custom] or len(shown) == 2

        # The stack diff: torch and the GPU differ (highlighted and marked), CUDA does not.
        torch = page.locator("#compare-stack tr[data-component=torch]")
        assert "differs" in torch.get_attribute("class") and "≠ differs" in torch.inner_text()
        assert "2.11.0" in torch.inner_text() and "2.10.0+cu128" in torch.inner_text()
        highlighted = torch.locator("td").first.evaluate("td => getComputedStyle(td).backgroundColor")
        cuda = page.locator("#compare-stack tr[data-component=cuda]")
        assert cuda.get_attribute("class") == "same" and "differs" not in cuda.inner_text()
        plain = cuda.locator("td").first.evaluate("td => getComputedStyle(td).backgroundColor")
        assert highlighted != plain
        assert "differs" in page.locator("#compare-stack tr[data-component=gpu]").get_attribute("class")

        # The side-by-side table has each trial's value.
        values = page.inner_text("#compare-values")
        assert "47.4" in values and "38" in values
    finally:
        context.close()
    assert errors == []
