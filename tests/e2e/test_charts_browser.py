"""In Chromium against a real `campaign serve`: the charts page draws the break-even chart, the
what-if moves it without a reload, a share link opens without login, and its export opens offline.

scripts/screenshots retakes docs/charts.png and docs/status.png the same way.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.support.browser import login_url, on_board
from tests.support.charts import SLUG, build_fixture_campaign

pytestmark = pytest.mark.browser
T_BASE = 1000 / 82


@pytest.fixture
def server(live_server):
    """The live server (demo loaded) plus the fixture campaign, and a login URL that opens the charts."""
    on_board(live_server, build_fixture_campaign)
    live_server.charts_login = login_url(live_server, f"/campaigns/{SLUG}/charts")
    return live_server


def _wait_drawn(page, div_id: str) -> None:
    page.wait_for_function(
        "id => { const d = document.getElementById(id);"
        " return d && d.data && d.data.length > 0 && d.querySelector('.main-svg'); }",
        arg=div_id,
    )


def _chart_data(page, div_id: str) -> list[dict]:
    return page.evaluate(
        f"document.getElementById('{div_id}').data"
        ".map(t => ({name: t.name, x: Array.from(t.x), y: Array.from(t.y), mode: t.mode}))"
    )


def _errors(page) -> list[str]:
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    # Every page links a favicon (issue 21): a favicon.ico 404 counts too.
    page.on(
        "console", lambda msg: errors.append(f"{msg.text} {msg.location.get('url')}") if msg.type == "error" else None
    )
    page.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    return errors


def test_charts_what_if_share_and_offline_export(server, browser, tmp_path):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors = _errors(page)
    try:
        page.goto(server.charts_login)
        page.wait_for_url(f"**/campaigns/{SLUG}/charts")
        _wait_drawn(page, "chart-verify")
        traces = {t["name"]: t for t in _chart_data(page, "chart-verify")}
        line = traces["break-even (communication = savings)"]
        assert line["mode"] == "lines" and line["x"] == line["y"]
        points = {n: t for n, t in traces.items() if t["mode"] == "markers"}
        assert len(points) == 6 and "NCCL on PCIe (seed node)" in points
        assert points["NCCL on PCIe (seed node)"]["x"][0] == pytest.approx(24.4)
        expect(page.locator("#chart-verify .scatterlayer .trace")).to_have_count(len(traces))
        for div in ("chart-latency", "chart-throughput", "chart-timeline"):
            _wait_drawn(page, div)

        # What-if: a new accept length moves the break-even figure and re-plots chart 1, no reload.
        page.evaluate("window.__sameDocument = true")
        before = float(page.get_attribute("#break-even-t-ar", "data-value"))
        assert before == pytest.approx((2.4 * T_BASE - 10.5) / 122 * 1000)
        page.fill("input[name=accept_length]", "3.2")
        # Predicates are functions, not expression strings: Playwright evals strings, which the CSP forbids.
        page.wait_for_function(
            f"() => Math.abs(parseFloat(document.getElementById('break-even-t-ar').dataset.value) - {before}) > 1e-6"
        )
        after = float(page.get_attribute("#break-even-t-ar", "data-value"))
        assert after == pytest.approx((3.2 * T_BASE - 10.5) / 122 * 1000)
        page.wait_for_function(
            "() => document.getElementById('chart-verify').data"
            ".some(t => t.name === 'NCCL eager' && Math.abs(t.y[0] - (3.2 * 1000 / 82 - 10.5)) < 1e-6)"
        )
        assert page.evaluate("window.__sameDocument") is True
        expect(page.locator("#whatif-result")).to_contain_text(
            "What-if", use_inner_text=True
        )  # its own swap, not the chart's

        # A share link, created on the campaign page, opens in a fresh context without login.
        page.goto(f"{server.url}/campaigns/{SLUG}")
        page.fill("#share-links input[name=name]", "stakeholders")
        page.click("#share-links button[type=submit]")
        page.wait_for_selector("#share-links tr.created .share-url")
        share_url = page.input_value("#share-links tr.created .share-url")
        assert share_url.startswith(f"{server.url}/s/")
    finally:
        context.close()
    assert errors == []

    fresh = browser.new_context()
    status = fresh.new_page()
    status_errors = _errors(status)
    try:
        status.goto(share_url)
        expect(status.locator("#profitable")).to_contain_text("Yes, with torch symm-mem two-shot", use_inner_text=True)
        expect(status.locator("#next")).to_contain_text("Expert parallelism", use_inner_text=True)
        _wait_drawn(status, "chart-break-even")
        _wait_drawn(status, "chart-throughput")
        expect(status.locator("form")).to_have_count(0)
        status.emulate_media(media="print")
        expect(status.locator("text=Download as one HTML file")).to_be_hidden()  # print shows the status only
        status.emulate_media(media="screen")
        with status.expect_download() as download:
            status.click("text=Download as one HTML file")
        exported = tmp_path / "status-export.html"
        download.value.save_as(exported)
    finally:
        fresh.close()
    assert status_errors == []  # no CSP violation, no script error

    # The export opens from disk with every network request refused.
    offline = browser.new_context()
    requests: list[str] = []
    offline.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
    offline_page = offline.new_page()
    offline_page.on("request", lambda request: requests.append(request.url))
    offline_errors = _errors(offline_page)
    try:
        offline.set_offline(True)
        offline_page.goto(exported.as_uri())
        _wait_drawn(offline_page, "chart-break-even")
        _wait_drawn(offline_page, "chart-throughput")
        names = [t["name"] for t in _chart_data(offline_page, "chart-break-even")]
        assert "break-even accept length τ*" in names and "torch symm-mem two-shot" in names
        expect(offline_page.locator("#profitable")).to_contain_text("Yes, with", use_inner_text=True)
    finally:
        offline.close()
    assert all(url.startswith("file:") for url in requests), requests
    assert offline_errors == []


def _axis_ranges(page, div_id: str) -> dict:
    """The drawn axes' ranges, in data units (plotly keeps log axes' ranges in log10)."""
    return page.evaluate(
        """id => { const l = document.getElementById(id)._fullLayout;
        const r = a => a.type === 'log' ? a.range.map(v => Math.pow(10, v)) : a.range.map(Number);
        return {x: r(l.xaxis), y: r(l.yaxis), xtype: l.xaxis.type}; }""",
        div_id,
    )


def _points_inside(page, div_id: str) -> list[tuple[float, float]]:
    """The chart's marker points, asserting each lies inside the drawn axes."""
    ranges = _axis_ranges(page, div_id)
    points = [(x, y) for t in _chart_data(page, div_id) if t["mode"] == "markers" for x, y in zip(t["x"], t["y"])]
    for x, y in points:
        assert ranges["x"][0] < x < ranges["x"][1] and ranges["y"][0] <= y < ranges["y"][1], (div_id, x, y, ranges)
    return points


def test_demo_campaigns_draw_their_answers(live_server, browser):
    """The shipped demos, as a new user opens them: the Kimi campaign draws tau* from the seed alone (a lower
    bound: accept length must exceed 2.0 with NCCL), the shootout a latency comparison and no EAGLE question."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors = _errors(page)
    try:
        page.goto(login_url(live_server, "/campaigns/kimi-k25-eagle3/charts"))
        page.wait_for_url("**/campaigns/kimi-k25-eagle3/charts")
        _wait_drawn(page, "chart-break-even")
        points = _points_inside(page, "chart-break-even")
        assert len(points) == 3
        names = {t["name"] for t in _chart_data(page, "chart-break-even")}
        assert any(n.startswith("lower bound on τ*") for n in names)
        assert "NCCL on PCIe (the baseline) (reported)" in names
        assert "FlashInfer PCIe-IPC allreduce (reported at 12 KiB)" in names  # not the axis' 56 KiB
        baseline = next(
            t for t in _chart_data(page, "chart-break-even") if t["name"] == "NCCL on PCIe (the baseline) (reported)"
        )
        assert baseline["x"] == [200] and abs(baseline["y"][0] - 122 * 0.2 / T_BASE) < 1e-9
        expect(page.locator("#break-even-tau")).to_have_attribute("data-lower-bound", "true")
        expect(page.locator("#break-even-tau")).to_contain_text("2.00", use_inner_text=True)
        expect(page.locator("#break-even-tau")).to_contain_text("lower bound", use_inner_text=True)
        expect(page.locator("#reported")).to_contain_text(
            "docstring", use_inner_text=True
        )  # each reported figure says its source
        _wait_drawn(page, "chart-latency")
        _points_inside(page, "chart-latency")
        _wait_drawn(page, "chart-throughput")  # the seed's reported 38 tok/s is drawn, on its approach's row
        drawn = {t["name"]: t for t in _chart_data(page, "chart-throughput")}
        assert drawn["reported elsewhere (not measured here)"]["x"] == [38]
        assert drawn["reported elsewhere (not measured here)"]["y"] == ["SGLang custom allreduce (IPC)"]
        _wait_drawn(page, "chart-timeline")
        stamps = [x for t in _chart_data(page, "chart-timeline") for x in t["x"] if x]
        assert stamps and all(x.startswith("2026-02-") for x in stamps)  # the history's dates, not the import's
        expect(page.locator("#chart-verify")).to_be_hidden()  # drawn only once every input is known

        page.goto(f"{live_server.url}/campaigns/allreduce-shootout/charts")
        _wait_drawn(page, "chart-comparison")
        bars = page.evaluate("document.getElementById('chart-comparison').data.map(t => Array.from(t.x))")
        values = [x for trace in bars for x in trace]
        x_range = _axis_ranges(page, "chart-comparison")["x"]
        assert values and all(x_range[0] <= v < x_range[1] for v in values)
        _wait_drawn(page, "chart-latency")
        assert len(_points_inside(page, "chart-latency")) == 6
        expect(page.locator("h1")).to_contain_text("Allreduce latency comparison", use_inner_text=True)
        expect(page.locator("main")).not_to_contain_text("EAGLE-3 now", use_inner_text=True)
        expect(page.locator("main")).not_to_contain_text("Is speculation profitable", use_inner_text=True)
        expect(page.locator("#chart-break-even")).to_be_hidden()
    finally:
        context.close()
    assert errors == []


def test_kimi_verify_chart_draws_each_reported_latency_at_its_point(live_server, browser):
    """Issue 32 item 6: with every cost known (tau 2.4, 3 draft steps x 0.8 ms, 9.5 ms verify compute) the
    Kimi demo has no trial of its own, only figures reported elsewhere: each is a point at (N_ar x t_ar,
    savings), NCCL's at (24.4 ms, 17.37 ms), inside the axes (the chart drew the region and no point)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors = _errors(page)
    try:
        page.goto(login_url(live_server, "/campaigns/kimi-k25-eagle3/charts"))
        page.wait_for_url("**/campaigns/kimi-k25-eagle3/charts")
        _wait_drawn(page, "chart-break-even")
        reported = len(_points_inside(page, "chart-break-even"))
        for name, value in (
            ("accept_length", "2.4"),
            ("draft_steps", "3"),
            ("draft_step_ms", "0.8"),
            ("verify_compute_ms", "9.5"),
        ):
            page.fill(f"input[name={name}]", value)
        page.wait_for_selector("#whatif-result #verdict[data-profitable=false]")
        _wait_drawn(page, "chart-verify")
        points = _points_inside(page, "chart-verify")
        assert len(points) == reported == 3, points
        expect(page.locator("#chart-verify .scatterlayer .trace .points path")).to_have_count(reported)
        nccl = next(t for t in _chart_data(page, "chart-verify") if t["name"].startswith("NCCL on PCIe"))
        assert nccl["x"] == [pytest.approx(24.4)] and nccl["y"] == [pytest.approx(2.4 * T_BASE - 2.4 - 9.5)]
        assert abs(nccl["y"][0] - 17.37) < 0.01
    finally:
        context.close()
    assert errors == []


def test_kimi_answer_with_every_input_known_and_a_value_out_of_bounds(live_server, browser):
    """Issue 21: the Kimi demo's what-if with accept length 2.4, 3 draft steps x 0.8 ms and 9.5 ms verify
    compute answers "not profitable with NCCL (2.40 < tau* 2.98); FlashInfer PCIe-IPC would pay (tau* 1.03)",
    before and after "Save as campaign inputs", and the status page says the same from the stored values.
    tau = -1 on the way is sent, named next to its field, and clears the old answer."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors = _errors(page)
    page.on("dialog", lambda dialog: dialog.accept())  # hx-confirm on "Save as campaign inputs"
    verdict = "#whatif-result #verdict"
    expected = (
        "not profitable with NCCL on PCIe (the baseline) (2.40 < τ* 2.98",
        "0.81× plain decoding",
        "FlashInfer PCIe-IPC allreduce would pay (τ* 1.03",
    )
    try:
        page.goto(login_url(live_server, "/campaigns/kimi-k25-eagle3/charts"))
        page.wait_for_url("**/campaigns/kimi-k25-eagle3/charts")
        _wait_drawn(page, "chart-break-even")
        for name, value in (
            ("accept_length", "2.4"),
            ("draft_steps", "3"),
            ("draft_step_ms", "0.8"),
            ("verify_compute_ms", "9.5"),
        ):
            page.fill(f"input[name={name}]", value)
        page.wait_for_selector(f"{verdict}[data-profitable=false]")
        page.wait_for_function(
            "() => document.getElementById('break-even-tau').dataset.contains === 'the full break-even'"
        )
        text = page.inner_text(verdict)
        assert all(part in text for part in expected), text
        assert "lower bound" not in page.inner_text("#break-even-tau")
        _wait_drawn(page, "chart-verify")  # every input known: chart 1b is drawn too

        # tau = -1: sent (the form is novalidate), answered next to the field, the old answer gone.
        page.fill("input[name=accept_length]", "-1")
        page.wait_for_selector("#whatif-result [data-testid=whatif-invalid]")
        assert page.locator(verdict).count() == 0
        assert "Accept length τ" in page.inner_text("#whatif-result")
        page.wait_for_selector("#whatif-form .field-error")
        assert page.get_attribute("input[name=accept_length]", "aria-invalid") == "true"
        assert "greater than or equal to 1" in page.inner_text("#whatif-form .field-error")
        page.wait_for_function("() => document.getElementById('chart-break-even').hidden")
        page.fill("input[name=accept_length]", "2.4")
        page.wait_for_selector(f"{verdict}[data-profitable=false]")
        assert page.locator("#whatif-form .field-error").count() == 0

        page.click("text=Save as campaign inputs")
        page.wait_for_function(
            "() => !document.querySelector('[data-testid=whatif-active]')"
            " && document.querySelector('#whatif-result #verdict[data-profitable=false]')"
        )
        assert page.input_value("input[name=verify_compute_ms]") == "9.5"
        text = page.inner_text(verdict)
        assert all(part in text for part in expected), text

        page.goto(f"{live_server.url}/campaigns/kimi-k25-eagle3")
        page.click("#share-links button[type=submit]")
        page.wait_for_selector("#share-links tr.created .share-url")
        share_url = page.input_value("#share-links tr.created .share-url")
    finally:
        context.close()
    # The one 422 is the what-if's answer to tau = -1 (the XHR and the console line Chromium logs for it).
    assert [e for e in errors if "/charts/whatif?" not in e or "422" not in e] == [], errors
    assert any(e.startswith("422 ") for e in errors)

    viewer = browser.new_context()
    status = viewer.new_page()
    status_errors = _errors(status)
    try:
        status.goto(share_url)
        answer = status.inner_text("#profitable")
        assert "No, not with NCCL on PCIe (the baseline)" in answer and "Only if the accept length" not in answer
        assert "τ = 2.40 (entered on the campaign) is below τ* = 2.98, the full break-even" in answer
        assert "FlashInfer PCIe-IPC allreduce: 5.3 us (reported) → would pay (τ* 1.03" in answer
        _wait_drawn(status, "chart-break-even")
    finally:
        viewer.close()
    assert status_errors == []


def test_screenshots(live_server, browser, tmp_path):
    """The Kimi-K2.5 demo's charts and its status page render whole into screenshots (scripts/screenshots
    writes the docs' images the same way)."""
    out = tmp_path
    slug = "kimi-k25-eagle3"
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, device_scale_factor=1)
    page = context.new_page()
    try:
        page.goto(login_url(live_server, f"/campaigns/{slug}/charts"))
        for div in ("chart-break-even", "chart-latency", "chart-throughput", "chart-timeline"):
            _wait_drawn(page, div)
        page.wait_for_timeout(500)
        page.screenshot(path=str(out / "charts.png"), full_page=True)
        page.goto(f"{live_server.url}/campaigns/{slug}")
        page.click("#share-links button[type=submit]")
        page.wait_for_selector("#share-links tr.created .share-url")
        share_url = page.input_value("#share-links tr.created .share-url")
    finally:
        context.close()
    viewer = browser.new_context(viewport={"width": 1200, "height": 1000}, device_scale_factor=1)
    status = viewer.new_page()
    try:
        status.goto(share_url)
        _wait_drawn(status, "chart-break-even")
        status.wait_for_timeout(500)
        status.screenshot(path=str(out / "status.png"), full_page=True)
    finally:
        viewer.close()
    for name in ("charts.png", "status.png"):
        assert (out / name).stat().st_size > 50_000, f"{name} looks empty"
