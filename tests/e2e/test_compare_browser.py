"""In Chromium against a real `campaign serve` with the fixture campaign: tick two trials on the campaign
page (an allreduce sweep and its re-run after a stack upgrade), press "Compare selected", and read the
comparison: Plotly's traces (from the chart div) hold both trials' measured values, the metric menu switches
the chart, and the stack diff highlights the components that differ.

scripts/screenshots draws docs/compare.png from the same campaign."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.support.browser import login_url, on_board
from tests.support.charts import H200, RERUN_US, SLUG, build_fixture_rerun

pytestmark = pytest.mark.browser


@pytest.fixture
def server(live_server):
    """The live server plus the fixture campaign and a re-run of its NCCL eager trial on an upgraded stack
    (torch 2.12.0, NCCL 2.28.3; same GPUs); the ids of both trials."""
    live_server.eager, live_server.rerun = on_board(live_server, build_fixture_rerun)
    live_server.login = login_url(live_server, f"/campaigns/{SLUG}")
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
        page.check(f"#recent-trials input[name=trial][value='{server.rerun}']")
        # The list reloads itself when the campaign changes: the ticks survive it.
        # (The queue reloads on the same event: wait for the trial list's own swap, not the first one.)
        page.evaluate(
            "() => { window.__reloaded = false;"
            " document.body.addEventListener('htmx:afterSwap', (e) => {"
            " if (e.detail.target && e.detail.target.id === 'recent-trials') window.__reloaded = true; });"
            " htmx.trigger(document.body, 'campaign-changed'); }"
        )
        page.wait_for_function("() => window.__reloaded === true")
        expect(page.locator(f"#recent-trials input[name=trial][value='{server.eager}']")).to_be_checked()
        expect(page.locator(f"#recent-trials input[name=trial][value='{server.rerun}']")).to_be_checked()
        compare.click()
        page.wait_for_url(f"**/campaigns/{SLUG}/compare?trial=*")
        page.wait_for_function(
            "() => { const d = document.getElementById('compare-chart');"
            " return d && d.data && d.data.length > 0 && d.querySelector('.main-svg'); }"
        )
        tokens = (1, 8, 64, 256)
        by = {(t["trial"], t["metric"]): t for t in _traces(page)}
        before, after = by[(server.eager, "allreduce_latency_us")], by[(server.rerun, "allreduce_latency_us")]
        # The sweep's points are its tokens (bytes say the same for one geometry): the rows run along them.
        assert before["x"] == after["x"] == list(tokens)
        assert before["y"] == [H200["nccl-eager"][t] for t in tokens] and after["y"] == [RERUN_US[t] for t in tokens]
        assert before["name"] == f"#{server.eager} NCCL eager" and after["name"] == f"#{server.rerun} NCCL eager"
        assert {t["metric"] for t in _traces(page)} == {"allreduce_latency_us", "allreduce_busbw_gbps"}

        # The metric menu shows one metric's traces at a time: both trials' latency curves.
        page.locator("#compare-chart .updatemenu-header-group").click()
        page.locator("#compare-chart .updatemenu-dropdown-button", has_text="allreduce_latency_us").click()
        page.wait_for_function(
            "() => document.getElementById('compare-chart').data"
            ".filter(t => t.visible === true).every(t => t.meta.metric === 'allreduce_latency_us')"
        )
        shown = [t["trial"] for t in _traces(page) if t["visible"] is True]
        assert shown == [server.eager, server.rerun] or shown == [server.rerun, server.eager]
        expect(page.locator("#compare-chart .scatterlayer .trace")).to_have_count(2)

        # The stack diff: torch and NCCL differ (highlighted and marked), the GPU does not.
        torch = page.locator("#compare-stack tr[data-component=torch]")
        text = torch.text_content() or ""
        assert torch.get_attribute("class") == "differs" and "≠ differs" in text
        assert "2.11.0" in text and "2.12.0" in text
        assert page.locator("#compare-stack tr[data-component=nccl]").get_attribute("class") == "differs"
        highlighted = torch.locator("td").first.evaluate("td => getComputedStyle(td).backgroundColor")
        gpu = page.locator("#compare-stack tr[data-component=gpu]")
        assert gpu.get_attribute("class") == "same" and "differs" not in (gpu.text_content() or "")
        plain = gpu.locator("td").first.evaluate("td => getComputedStyle(td).backgroundColor")
        assert highlighted != plain

        # The side-by-side table has each trial's value on the same row.
        row = page.locator("#compare-values tr[data-metric=allreduce_latency_us][data-point='tokens=8']")
        assert "47.4" in row.inner_text() and "43" in row.inner_text()
        # The re-run is on another stack: no verdict unless asked, and why.
        assert "different stack: torch" in (row.locator("td.verdict-cell").text_content() or "")
    finally:
        context.close()
    assert errors == []
