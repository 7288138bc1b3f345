"""A campaign measured at world size 1 (TP 1, one GPU) runs no allreduce in its verify step: the charts page and
the status page say so instead of claiming the campaign's default 122 allreduces per verify and a break-even
allreduce latency that no measurement has. On the committed sweep (docs/results/speculation-sweep-h200x1.yaml)
the verify chart's subtitle once read "T_base 16.12 ms, 122 allreduces per verify" and the what-if "break-even
t_ar* 193.9 us per allreduce (122 per verify)". Nor does the page list the sweep's steps as missing an allreduce
latency they do not have."""

from __future__ import annotations

import html as html_lib
import json
import re
from typing import Any

from app.db import session_scope
from app.state import app_state
from tests.support.results import ALPHAS, import_results

SLUG = "speculation-sweep-h200x1"
WHATIF = f"/campaigns/{SLUG}/charts/whatif"


def _imported(app) -> None:
    with session_scope(app_state(app).engine) as session:
        import_results(session, SLUG, ALPHAS)


def _figure(page: str, name: str) -> dict[str, Any] | None:
    found = re.search(rf'<script type="application/json" id="{name}">(.*?)</script>', page, re.S)
    assert found is not None, name
    return json.loads(found.group(1))


def _subtitle(figure: dict[str, Any]) -> str:
    return figure["layout"]["title"]["subtitle"]["text"]


def _text(page: str) -> str:
    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def test_the_charts_page_claims_no_allreduce_at_world_size_1(app, operator_client):
    _imported(app)
    page = operator_client.get(f"/campaigns/{SLUG}/charts").text
    # No curve over t_ar: nothing measured has an allreduce, so no chart claims the campaign's 122.
    assert _figure(page, "figure-break-even") is None
    verify = _figure(page, "figure-verify")
    assert verify is not None and verify["layout"]["meta"]["break_even_t_ar_us"] is None
    assert _subtitle(verify).startswith("world size 1: no allreduces in the verify step")
    assert "122" not in _subtitle(verify) and "t_ar* =" not in _subtitle(verify)
    text = _text(page)
    assert "122 allreduces per verify" not in page and "(122 per verify)" not in text
    # The what-if says why, as it does for N_ar = 0, and still answers: the grid's cell pays at batch 1.
    assert "No break-even allreduce latency: allreduces per verify is 0" in text
    assert 'data-testid="world-1"' in page and "World size 1: no allreduces in the verify step" in text
    assert 'id="break-even-t-ar"' not in page
    found = re.search(r'data-testid="tau-star-no-comm">([\d.]+)<', page)
    assert found is not None and float(found.group(1)) == 1.23
    assert "with τ 2.70 it pays" in text and "would pay (τ* 1.23" in text
    assert "Allreduces per verify: 0 (world size 1: no allreduces in the verify step" in text
    assert "the campaign's 122 counts a verify step that communicates" in text
    # The point is placed at its grid cell without an allreduce latency of 0 us.
    assert "none world size 1: no allreduce" in text


def test_the_status_page_claims_no_allreduce_at_world_size_1(app, operator_client, client):
    _imported(app)
    r = operator_client.post(f"/campaigns/{SLUG}/share-links", data={"name": "q"}, headers={"HX-Request": "true"})
    found = re.search(r'class="share-url" readonly value="http://127.0.0.1([^"]+)"', r.text)
    assert found is not None, r.text
    text = _text(client.get(found.group(1)).text)
    answer = text[text.index("Is EAGLE-3 profitable now?") : text.index("Best result vs baseline")]
    assert "Yes, with Verify step compute, 1 GPU, in a CUDA graph" in answer and "2.19× plain decoding" in answer
    assert "us per allreduce" not in answer and "communication, draft and verify compute" not in answer
    assert "World size 1: no allreduces in the verify step" in answer
    assert "Not drawn: world size 1, no allreduces in the verify step" in text
    assert "Not drawn until the model has its inputs" not in text


def test_a_what_if_allreduce_count_brings_the_curve_back_and_says_the_one_gpu_step_has_none(app, operator_client):
    """A person who asks what 122 allreduces would cost gets the curve, and the chart says the measured step has
    none (it is not drawn on the t_ar axis)."""
    _imported(app)
    r = operator_client.get(WHATIF, params={"allreduces_per_verify": "122"}, headers={"HX-Request": "true"})
    assert r.status_code == 200
    curve = _figure(r.text, "figure-break-even")
    assert curve is not None
    subtitle = _subtitle(curve)
    assert "122 allreduces per verify" in subtitle
    assert "1 approach at world size 1, no allreduces in the verify step (not drawn)" in subtitle
    text = _text(r.text)
    assert "(world size 1: no allreduces in the verify step)" in text and "t ar 0.0 us" not in text


def test_the_charts_page_asks_no_allreduce_latency_of_steps_that_have_none(app, operator_client):
    """The sweep's decode, verify and draft steps ran on one GPU: none is waiting for an allreduce latency, so the
    page does not list them as missing one ("No GPU allreduce latency at 56 KiB yet: Decode step T_base(b), ...,
    EAGLE-3 draft step in a CUDA graph, ...")."""
    _imported(app)
    text = _text(operator_client.get(f"/campaigns/{SLUG}/charts").text)
    assert "No GPU allreduce latency" not in text
