"""In Chromium against a real `campaign serve`: the charts page draws the speedup-vs-batch chart of the
answer over batch sizes, with its points inside the axes and an interval band, and the Deploy panel."""

from __future__ import annotations

import pytest

from app.db import make_engine, session_scope
from app.security import create_login_token
from tests.support.speculation import BATCHES, SLUG, build_sweep_campaign

pytestmark = pytest.mark.browser


@pytest.fixture
def server(live_server):
    engine = make_engine(live_server.env["CAMPAIGN_DATABASE_URL"])
    try:
        with session_scope(engine) as session:
            build_sweep_campaign(session)
            token = create_login_token(session, 3600)
    finally:
        engine.dispose()
    live_server.login = f"{live_server.url}/login?token={token}&next=/campaigns/{SLUG}/charts"
    return live_server


def test_speedup_against_batch_has_points_in_the_axes_and_a_band(server, browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(server.login)
        page.wait_for_url(f"**/campaigns/{SLUG}/charts")
        page.wait_for_function(
            "() => { const d = document.getElementById('chart-speedup-batch');"
            " return d && d.data && d.data.length && d.querySelector('.main-svg'); }"
        )
        traces = page.evaluate(
            "document.getElementById('chart-speedup-batch').data.map(t => ({name: t.name, fill: t.fill || null,"
            " x: Array.from(t.x), y: Array.from(t.y)}))"
        )
        lines = [t for t in traces if t["name"] in ("NCCL in a CUDA graph", "symmetric memory one-shot in a graph")]
        assert len(lines) == 2 and all(t["x"] == list(BATCHES) for t in lines)
        bands = [t for t in traces if t["fill"] == "tonexty"]
        assert len(bands) == 3  # one per approach with a speedup
        one = next(t for t in traces if t["name"] == "1.0: no gain")
        assert one["y"] == [1.0, 1.0]
        # Every point of every line lies inside the plot area Plotly drew (its axes' pixel ranges).
        inside = page.evaluate(
            """() => {
              const d = document.getElementById('chart-speedup-batch');
              const xa = d._fullLayout.xaxis, ya = d._fullLayout.yaxis;
              const out = [];
              d._fullData.forEach(t => { if (t.mode && t.mode.includes('markers')) {
                t.x.forEach((x, i) => { const px = xa.l2p(xa.d2l(x)), py = ya.l2p(ya.d2l(t.y[i]));
                  out.push(px >= 0 && px <= xa._length && py >= 0 && py <= ya._length); }); } });
              return out; }"""
        )
        assert inside and all(inside)
        # The band is drawn (a filled path) and the markers too.
        assert page.locator("#chart-speedup-batch .scatterlayer .trace .js-fill").count() >= 3
        assert page.locator("#chart-speedup-batch .scatterlayer .point").count() >= 2 * len(BATCHES)
        page.wait_for_function("() => document.querySelector('#chart-speedup-heatmap .main-svg')")
        sentence = page.locator("[data-sentence]").inner_text()
        assert sentence.startswith("On this node EAGLE-3 pays")
        sglang = page.locator('#deploy pre[data-engine="sglang"]').inner_text()
        assert (
            "--speculative-algorithm EAGLE3" in sglang and "--cuda-graph-max-bs-decode 64" in sglang
        )  # B*: 128 is not shown to pay (one trial)
        assert "num_speculative_tokens_per_batch_size" in page.locator('#deploy pre[data-engine="vllm"]').inner_text()
        assert errors == []
    finally:
        context.close()
