"""The charts page and its what-if over HTTP: computed on GET, stored only by the operator's save."""

from __future__ import annotations

import html as html_lib
import json
import re

import pytest
from fastapi.testclient import TestClient

from app.state import app_state
from app.templating import PLOTLY_JS_ASSET, asset_url
from tests.support.charts import SLUG

WHATIF = f"/campaigns/{SLUG}/charts/whatif"


@pytest.fixture
def operator(fixture_app, operator_client):
    return operator_client


def _figure(html: str, name: str):
    found = re.search(rf'<script type="application/json" id="{name}">(.*?)</script>', html, re.S)
    assert found, f"no figure {name}"
    return json.loads(found.group(1))


def _value(html: str, element_id: str) -> float:
    found = re.search(rf'id="{element_id}" data-value="([^"]*)"', html)
    assert found, f"no value {element_id}"
    return float(found.group(1))


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


def test_a_what_if_value_out_of_bounds_answers_nothing_and_names_its_field(operator):
    """tau = -1: a 422 partial that replaces the last result (no answer, no figures left stale) and the
    form-error event that marks the field; saving it is refused the same way and stores nothing."""
    for bad in ("-1", "0.5", "1025", "nan", "x", "1e309", "-1e309"):
        r = operator.get(WHATIF, params={"accept_length": bad, "draft_steps": "3"}, headers={"HX-Request": "true"})
        assert r.status_code == 422, bad
        assert 'data-testid="whatif-invalid"' in r.text and "Accept length τ" in r.text, bad
        assert 'id="verdict"' not in r.text and "figure-break-even" not in r.text, bad
        event = json.loads(r.headers["HX-Trigger"])["form-error"]
        assert event["field"] == "accept_length" and event["message"].startswith("Accept length τ: "), bad
        assert "HX-Retarget" not in r.headers  # it is the what-if result, not a flash
    r = operator.post(f"{WHATIF}/save", data={"accept_length": "-1"}, headers={"HX-Request": "true"})
    assert r.status_code == 422 and json.loads(r.headers["HX-Trigger"])["form-error"]["field"] == "accept_length"
    assert operator.get(f"/api/campaigns/{SLUG}").json()["accept_length"] == 2.4


def test_the_what_if_form_has_the_schemas_bounds(operator):
    """One set of bounds: each what-if input's min and max on the page are the API schema's."""
    from app.models import ModelInputFields
    from app.schemas import CampaignCreate

    html = operator.get(f"/campaigns/{SLUG}/charts").text
    start = html.index('id="whatif-form"')
    form = html[start : html.index("</form>", start)]
    schema = CampaignCreate.model_json_schema()["properties"]
    assert ModelInputFields.WHAT_IF and set(ModelInputFields.WHAT_IF) <= set(schema)
    for name in ModelInputFields.WHAT_IF:
        tag = re.search(rf'<input type="text" inputmode="decimal" name="{name}"[^>]*>', form)
        assert tag, name
        attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', tag.group(0)))
        prop = next(b for b in schema[name].get("anyOf", [schema[name]]) if b.get("type") != "null")
        low = prop.get("minimum", prop.get("exclusiveMinimum"))
        assert float(attrs["data-min"]) == low and float(attrs["data-max"]) == prop["maximum"], name
        assert schema[name]["title"] in form  # its label, from the same declaration
    # text inputs: what the browser cannot parse as a number (1e309) still reaches the server (issue 32 item 8)
    assert (
        len(re.findall(r'<input type="text" inputmode="decimal"', form)) == len(ModelInputFields.WHAT_IF) + 1
    )  # + t_ar
    assert "novalidate" in form  # the server's bounds decide, and say so next to the field


def test_kimi_demo_answers_once_every_input_is_known(app, operator_client):
    """Issue 21's numbers on the shipped demo, in the what-if, after saving them, and on the status page."""
    from app.db import session_scope
    from app.domain.demo import load_demo

    with session_scope(app_state(app).engine) as session:
        load_demo(session)
    inputs = {"accept_length": "2.4", "draft_steps": "3", "draft_step_ms": "0.8", "verify_compute_ms": "9.5"}
    expected = (
        "not profitable with NCCL on PCIe (the baseline) (2.40 < τ* 2.98, margin -0.58, -7.0 ms per cycle): "
        "0.81× plain decoding; FlashInfer PCIe-IPC allreduce would pay (τ* 1.03, margin +1.37, +16.7 ms per cycle)"
    )
    r = operator_client.get("/campaigns/kimi-k25-eagle3/charts/whatif", params=inputs, headers={"HX-Request": "true"})
    assert expected in _text(r.text, "verdict")
    assert "the full break-even" in _text(r.text, "break-even-tau") and "lower bound" not in r.text
    r = operator_client.post(
        "/campaigns/kimi-k25-eagle3/charts/whatif/save", data=inputs, headers={"HX-Request": "true"}
    )
    assert r.status_code == 200
    page = operator_client.get("/campaigns/kimi-k25-eagle3/charts").text
    assert expected in _text(page, "verdict") and 'data-testid="whatif-active"' not in page
    r = operator_client.post(
        "/campaigns/kimi-k25-eagle3/share-links", data={"name": "s"}, headers={"HX-Request": "true"}
    )
    url = re.search(r'class="share-url" readonly value="http://127.0.0.1([^"]+)"', r.text)
    assert url, r.text
    path = url.group(1)
    status = " ".join(html_lib.unescape(re.sub(r"<[^>]+>", "", operator_client.get(path).text)).split())
    assert "No, not with NCCL on PCIe (the baseline)" in status and "Only if the accept length" not in status
    assert (
        "The accept length τ = 2.40 (entered on the campaign) is below τ* = 2.98, the full break-even (communication, "
        "draft and verify compute): margin -0.58, -7.0 ms per cycle, 0.81× plain decoding; speculation pays below "
        "142.4 us per allreduce."
    ) in status
    assert "FlashInfer PCIe-IPC allreduce: 5.3 us (reported) → would pay (τ* 1.03, margin +1.37" in status


def _text(html: str, element_id: str) -> str:
    """The text of the element with that id (up to its closing tag), tags stripped, spaces collapsed."""
    start = html.index(f'id="{element_id}"')
    body = html[html.index(">", start) + 1 : html.index("</dd>", start)]
    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", "", body)).split())


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
            "draft_steps": "1",  # tau <= k + 1
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


def test_an_impossible_accept_length_is_refused_by_the_what_if(operator):
    """Issue 32 item 7: tau is at most draft steps + 1, the form's steps or the campaign's."""
    r = operator.get(WHATIF, params={"accept_length": "10", "draft_steps": "3"}, headers={"HX-Request": "true"})
    assert r.status_code == 422 and 'id="verdict"' not in r.text
    event = json.loads(r.headers["HX-Trigger"])["form-error"]
    assert event["field"] == "accept_length" and "above 4" in event["message"]
    steps = operator.get(f"/api/campaigns/{SLUG}").json()["draft_steps"]
    r = operator.get(WHATIF, params={"accept_length": str(steps + 1.5)}, headers={"HX-Request": "true"})
    assert r.status_code == 422  # against the campaign's own draft steps
    r = operator.get(WHATIF, params={"draft_steps": "1", "accept_length": "2.0"}, headers={"HX-Request": "true"})
    assert r.status_code == 200  # tau = k + 1 is possible (every draft accepted)
    r = operator.post(
        f"{WHATIF}/save", data={"accept_length": "10", "draft_steps": "3"}, headers={"HX-Request": "true"}
    )
    assert r.status_code == 422
    assert operator.get(f"/api/campaigns/{SLUG}").json()["accept_length"] == 2.4


def test_a_stored_input_can_be_cleared_from_the_form(operator):
    html = operator.get(f"/campaigns/{SLUG}/charts").text
    assert 'data-testid="clear-accept_length"' in html
    assert 'data-testid="clear-verify_tokens"' not in html  # its column is never empty
    r = operator.post(f"{WHATIF}/clear/accept_length", headers={"HX-Request": "true"})
    assert r.status_code in (200, 204), r.text
    assert operator.get(f"/api/campaigns/{SLUG}").json()["accept_length"] is None
    assert 'data-testid="clear-accept_length"' not in operator.get(f"/campaigns/{SLUG}/charts").text
    assert operator.post(f"{WHATIF}/clear/verify_tokens", headers={"HX-Request": "true"}).status_code == 422
    assert operator.post(f"{WHATIF}/clear/slug", headers={"HX-Request": "true"}).status_code == 422


def test_zero_allreduces_per_verify_names_the_real_cause(app, operator_client):
    """Issue 32 item 8: with N_ar = 0 the page said nothing useful (an empty "not enough inputs" list); the cause
    is that a verify step without communication has no break-even allreduce latency, and tau* is then
    (T_draft + T_verify,compute) / T_base."""
    from app.db import session_scope
    from app.domain.demo import load_demo

    with session_scope(app_state(app).engine) as session:
        load_demo(session)
    inputs = {
        "accept_length": "2.4",
        "draft_steps": "3",
        "draft_step_ms": "0.8",
        "verify_compute_ms": "9.5",
        "allreduces_per_verify": "0",
    }
    r = operator_client.get("/campaigns/kimi-k25-eagle3/charts/whatif", params=inputs, headers={"HX-Request": "true"})
    assert r.status_code == 200
    text = html_lib.unescape(re.sub(r"<[^>]+>", "", r.text))
    assert "allreduces per verify is 0" in text and "draft cost" not in text
    found = re.search(r'data-testid="tau-star-no-comm">([\d.]+)<', r.text)
    assert found, r.text
    tau_star = float(found.group(1))
    assert tau_star == pytest.approx((3 * 0.8 + 9.5) / (1000 / 82), abs=0.005)
    assert "pays" in text  # 2.4 > 0.98


def test_an_allreduce_latency_what_if_replaces_the_measured_one(operator):
    """Issue 32 item 8: t_ar in us, used in place of the measured curve and said; never stored."""
    base = operator.get(WHATIF, params={}, headers={"HX-Request": "true"}).text
    r = operator.get(WHATIF, params={"allreduce_latency_us": "500"}, headers={"HX-Request": "true"})
    assert r.status_code == 200 and 'data-testid="whatif-t-ar"' in r.text and "500 us per allreduce" in r.text
    verdict = _text(r.text, "verdict")
    assert "what-if t_ar" in verdict and verdict != _text(base, "verdict")
    assert "not profitable" in verdict  # 122 x 500 us = 61 ms of communication per verify
    fast = _text(operator.get(WHATIF, params={"allreduce_latency_us": "1"}).text, "verdict")
    assert (
        "what-if t_ar" in fast and "profitable</b>" in operator.get(WHATIF, params={"allreduce_latency_us": "1"}).text
    )
    for bad in ("0", "-3", "1e309", "x"):
        r = operator.get(WHATIF, params={"allreduce_latency_us": bad}, headers={"HX-Request": "true"})
        assert (
            r.status_code == 422
            and json.loads(r.headers["HX-Trigger"])["form-error"]["field"] == "allreduce_latency_us"
        )
    r = operator.post(f"{WHATIF}/save", data={"allreduce_latency_us": "500"}, headers={"HX-Request": "true"})
    assert r.status_code == 200  # nothing of it is stored
    assert "500 us per allreduce" not in operator.get(f"/campaigns/{SLUG}/charts").text


def test_acceptance_is_entered_three_ways_from_the_page(operator):
    """Issue 33 item 3: per k, conditional alphas, or vLLM's unconditional rates (converted, and said)."""
    url = f"/campaigns/{SLUG}/charts/acceptance"
    r = operator.post(url, data={"accept_length_by_k": "1: 1.8, 3: 2.4"}, headers={"HX-Request": "true"})
    assert r.status_code == 200 and "HX-Redirect" in r.headers, r.text
    assert operator.get(f"/api/campaigns/{SLUG}").json()["accept_length_by_k"] == {"1": 1.8, "3": 2.4}
    r = operator.post(url, data={"accept_unconditional": "0.8, 0.56"}, headers={"HX-Request": "true"})
    body = operator.get(f"/api/campaigns/{SLUG}").json()
    assert body["accept_alphas"] == pytest.approx([0.8, 0.7]) and body["accept_unconditional"] == [0.8, 0.56]
    page = operator.get(f"/campaigns/{SLUG}/charts").text
    assert "converted from vLLM&#39;s unconditional" in page or "converted from vLLM's unconditional" in page
    r = operator.post(url, data={"accept_alphas": "0.9, 0.5"}, headers={"HX-Request": "true"})
    assert operator.get(f"/api/campaigns/{SLUG}").json()["accept_unconditional"] is None
    # the one bound, and a clear message for text that is not a list
    for data, field in (
        ({"accept_length_by_k": "1: 5"}, "accept_length_by_k"),
        ({"accept_alphas": "a, b"}, "accept_alphas"),
    ):
        r = operator.post(url, data=data, headers={"HX-Request": "true"})
        assert r.status_code == 422 and json.loads(r.headers["HX-Trigger"])["form-error"]["field"] == field, r.text


def test_the_page_lists_allreduces_from_another_stack_as_not_combined(fixture_app, operator):
    """With T_base read from the seed node's baseline trial (nothing typed), the 2x H200 allreduces are listed as
    not combined with it, each with the stack difference, and the verify chart draws only the seed node's points."""
    from app.db import session_scope
    from app.domain import campaigns

    with session_scope(app_state(fixture_app).engine) as session:
        campaigns.get_campaign(session, SLUG).baseline_tok_s = None
    html = operator.get(f"/campaigns/{SLUG}/charts").text
    block = re.search(r"<div class=\"missing small\" data-other-stack>(.*?)</div>", html, re.S)
    assert block is not None, html
    text = " ".join(re.sub(r"<[^>]+>", " ", block.group(1)).split())
    assert "Not combined with the plain decode step" in text
    assert "torch symm-mem two-shot: trial #" in text and "GPU NVIDIA RTX PRO 6000 Blackwell -&gt; NVIDIA H200" in text
    names = {t["name"] for t in _figure(html, "figure-verify")["data"] if t.get("mode") == "markers"}
    assert "NCCL on PCIe (seed node)" in names and "torch symm-mem two-shot" not in names
