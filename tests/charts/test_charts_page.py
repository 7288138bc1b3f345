"""The charts page and its what-if over HTTP: computed on GET, stored only by the operator's save."""

from __future__ import annotations

import json
import re

import pytest
from fastapi.testclient import TestClient

from app.templating import PLOTLY_JS_ASSET, asset_url
from tests.support.charts import SLUG

WHATIF = f"/campaigns/{SLUG}/charts/whatif"


@pytest.fixture
def operator(fixture_app, operator_client):
    return operator_client


def _figure(html: str, name: str):
    return json.loads(re.search(rf'<script type="application/json" id="{name}">(.*?)</script>', html, re.S).group(1))


def _value(html: str, element_id: str) -> float:
    return float(re.search(rf'id="{element_id}" data-value="([^"]*)"', html).group(1))


def test_charts_page_embeds_four_figures_and_local_plotly(operator):
    html = operator.get(f"/campaigns/{SLUG}/charts").text
    for name in ("figure-verify", "figure-latency", "figure-throughput", "figure-timeline"):
        assert _figure(html, name)["data"], name
    assert f'<script src="{asset_url(PLOTLY_JS_ASSET)}" defer></script>' in html and "cdn" not in html.lower()
    assert _value(html, "break-even-t-ar") == pytest.approx(153.838, abs=1e-3)
    assert 'value="2.4"' in html  # the form starts from the campaign's inputs
    assert "profitable</b> with torch symm-mem two-shot" in html


def test_what_if_recomputes_without_storing(operator):
    r = operator.get(WHATIF, params={"accept_length": "1.5", "draft_steps": "3"}, headers={"HX-Request": "true"})
    assert r.status_code == 200 and "<html" not in r.text
    assert 'data-testid="whatif-active"' in r.text
    assert _value(r.text, "break-even-t-ar") == pytest.approx((1.5 * 1000 / 82 - 10.5) / 122 * 1000)
    fig = _figure(r.text, "figure-verify")
    eager = next(t for t in fig["data"] if t["name"] == "NCCL eager")
    assert eager["y"][0] == pytest.approx(1.5 * 1000 / 82 - 10.5)
    page = operator.get(f"/campaigns/{SLUG}/charts").text
    assert _value(page, "break-even-t-ar") == pytest.approx(153.838, abs=1e-3)


def test_what_if_with_blank_and_unchanged_fields_is_the_campaign(operator):
    r = operator.get(WHATIF, params={"accept_length": "2.4", "draft_steps": "", "verify_tokens": "4"})
    assert 'data-testid="whatif-active"' not in r.text
    assert _value(r.text, "break-even-t-ar") == pytest.approx(153.838, abs=1e-3)


def test_what_if_rejects_nonsense_as_a_flash(operator):
    r = operator.get(WHATIF, params={"accept_length": "0.5"}, headers={"HX-Request": "true"})
    assert r.status_code == 422 and r.headers["HX-Retarget"] == "#flash" and "accept_length" in r.text


def test_a_campaign_without_speculation_gets_a_latency_comparison(operator):
    assert operator.post("/api/campaigns", json={"slug": "bare", "name": "Bare"}).status_code == 201
    html = operator.get("/campaigns/bare/charts").text
    assert 'data-testid="latency-comparison"' in html and "Allreduce latency comparison" in html
    assert "Is speculation profitable" not in html and "EAGLE-3 now" not in html
    assert _figure(html, "figure-break-even") is None and _figure(html, "figure-verify") is None
    # Nothing measured: no empty axes, a note instead.
    assert _figure(html, "figure-comparison") is None and _figure(html, "figure-latency") is None
    assert _figure(html, "figure-throughput") is None and "Not drawn yet" in html
    # An accept length makes it a speculation campaign: with every input the full answer is drawn.
    r = operator.get(
        "/campaigns/bare/charts/whatif",
        params={
            "baseline_tok_s": "82",
            "accept_length": "2",
            "draft_steps": "0",
            "draft_step_ms": "0",
            "verify_compute_ms": "0",
        },
    )
    assert 'data-testid="latency-comparison"' not in r.text and _figure(r.text, "figure-verify")["data"]
    assert _figure(r.text, "figure-break-even")["data"]


def test_missing_inputs_are_said_instead_of_drawn(operator):
    assert (
        operator.post("/api/campaigns", json={"slug": "spec", "name": "Spec", "accept_length": 2.2}).status_code == 201
    )
    html = operator.get("/campaigns/spec/charts").text
    assert 'data-testid="missing"' in html and "plain decode step T_base" in html
    assert _figure(html, "figure-break-even") is None and _figure(html, "figure-verify") is None


def test_save_as_campaign_inputs(operator):
    r = operator.post(
        f"{WHATIF}/save",
        data={"accept_length": "3.1", "draft_steps": "", "verify_compute_ms": "8"},
        headers={"HX-Request": "true"},
        follow_redirects=False,
    )
    # htmx navigates (HX-Redirect on a 200): a 303 would be followed by the XHR and nest the page.
    assert r.status_code == 200 and r.headers["HX-Redirect"] == f"/campaigns/{SLUG}/charts" and not r.text
    campaign = operator.get(f"/api/campaigns/{SLUG}").json()
    assert campaign["accept_length"] == 3.1 and campaign["verify_compute_ms"] == 8.0 and campaign["draft_steps"] == 3


def test_save_needs_csrf_and_charts_need_login(fixture_app, operator):
    r = operator.post(f"{WHATIF}/save", data={"accept_length": "3.1"}, headers={"X-CSRF-Token": "nope"})
    assert r.status_code == 403
    with TestClient(fixture_app, base_url="http://127.0.0.1") as anonymous:
        assert anonymous.get(f"/campaigns/{SLUG}/charts", follow_redirects=False).status_code == 303
        assert anonymous.get(WHATIF, headers={"accept": "application/json"}).status_code == 401
        assert anonymous.post(f"{WHATIF}/save", data={"accept_length": "3"}).status_code == 401
