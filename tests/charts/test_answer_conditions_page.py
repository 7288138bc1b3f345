"""The charts page and the API give the answer per condition set: the committed sweep offers context 1,024
(the default, named) and 4,096, each figure names its trials and conditions, and asking for 4,096 says what is
missing there instead of borrowing 1,024's inputs."""

from __future__ import annotations

import re
from pathlib import Path

from app.db import session_scope
from app.domain.campaign_files import import_campaign
from app.domain.demo import load_demo
from app.state import app_state
from tests.support.results import ALPHAS, import_results

SLUG = "speculation-sweep-h200x1"


def _imported(app) -> None:
    with session_scope(app_state(app).engine) as session:
        import_results(session, SLUG, ALPHAS)


def test_the_charts_page_lets_a_person_choose_the_conditions(app, operator_client, api_headers, client):
    _imported(app)
    html = operator_client.get(f"/campaigns/{SLUG}/charts").text
    assert 'id="condition-set"' in html and '<select name="conditions"' in html
    text = " ".join(re.sub(r"<[^>]+>", " ", html).split())
    assert "context 1,024, graph" in text and "(the default: the most complete set)" in text
    assert "context 4,096, graph" in text  # offered in the select
    body = client.get(f"/api/campaigns/{SLUG}/answer", headers=api_headers).json()
    assert body["conditions"] == body["default_conditions"] and "context=1024" in body["conditions"]
    assert all(i["conditions"] for i in body["inputs"] if i["trials"])  # every measured figure names them
    decode = next(i for i in body["inputs"] if i["name"] == "decode step at batch 128")
    assert decode["trials"] and "dense stand-in, 61 layers" in decode["conditions"]
    at_4096 = client.get(f"/api/campaigns/{SLUG}/answer?context=4096", headers=api_headers).json()
    assert at_4096["approaches"] == [] and "context=4096" in at_4096["conditions"]
    assert any(m["what"].startswith("verify compute") and "not borrowed" in m["how"] for m in at_4096["missing"])
    assert (
        at_4096["default_conditions"] == body["conditions"] and "context 1,024" in at_4096["default_conditions_label"]
    )
    assert next(c for c in body["condition_sets"] if c["key"] == body["default_conditions"])["answers"]
    page = operator_client.get(f"/campaigns/{SLUG}/charts?conditions={at_4096['conditions']}").text
    assert "measured only under other conditions" in page
    assert "(the default is context 1,024, graph" in " ".join(re.sub(r"<[^>]+>", " ", page).split())
    assert client.get(f"/api/campaigns/{SLUG}/answer?context=8192", headers=api_headers).status_code == 422


def test_the_what_if_swaps_in_the_whole_answer(app, operator_client):
    """The what-if partial carries the answer over batches too (out of band): its grid, inputs and figures are
    computed with the what-if, so B*, the tiers and the Deploy panel follow it (issue 33)."""
    _imported(app)
    page = operator_client.get(f"/campaigns/{SLUG}/charts").text
    assert page.count('id="speculation-answer"') == 1 and "hx-swap-oob" not in page
    r = operator_client.get(
        f"/campaigns/{SLUG}/charts/whatif", params={"draft_step_ms": "50"}, headers={"HX-Request": "true"}
    )
    assert r.status_code == 200 and '<div id="speculation-answer" hx-swap-oob="innerHTML">' in r.text
    heatmap = re.search(r'id="figure-speedup-heatmap">(.*?)</script>', r.text, re.S)
    before = re.search(r'id="figure-speedup-heatmap">(.*?)</script>', page, re.S)
    assert heatmap and before and heatmap.group(1) != before.group(1)  # the grid was recomputed
    text = " ".join(re.sub(r"<[^>]+>", " ", r.text).split())
    assert "draft step at batch 1 50 (exact) what-if" in text  # the inputs table names the what-if figure
    assert "1: off" in text  # 50 ms a draft step: batch 1 no longer speculates
    assert 'id="deploy"' in r.text or "Deploy" in r.text


def _status_page(operator_client, client, slug: str) -> str:
    r = operator_client.post(f"/campaigns/{slug}/share-links", data={"name": "q"}, headers={"HX-Request": "true"})
    found = re.search(r'class="share-url" readonly value="http://127.0.0.1([^"]+)"', r.text)
    assert found is not None, r.text
    page = client.get(found.group(1))
    assert page.status_code == 200
    return page.text


def test_the_status_page_offers_the_condition_sets_and_flags_contradictions(app, operator_client, client):
    """The status page includes the charts page's answer partial: it names the sets (as links: it has no forms)
    and the contradictory inputs. Its template once imported its wording macros under the name `answer`, which
    hid the answer from the partial: no sets, no flags (the Kimi demo's 24.4 ms of allreduces in a 12.2 ms step
    went unsaid to stakeholders)."""
    _imported(app)
    text = " ".join(re.sub(r"<[^>]+>", " ", _status_page(operator_client, client, SLUG)).split())
    assert "Measured under: context 4,096, graph" in text  # a link to the other set
    assert "context 1,024, graph, world size 1, bf16, cuda; dense stand-in, 61 layers, hidden 7168 (default)" in text
    with session_scope(app_state(app).engine) as session:
        load_demo(session)
    text = " ".join(re.sub(r"<[^>]+>", " ", _status_page(operator_client, client, "kimi-k25-eagle3")).split())
    assert "Contradictory inputs" not in text  # issue 43 item 5: its 200 us is the verify step's 56 KiB figure
    demo = (Path(__file__).resolve().parents[2] / "app" / "demo" / "kimi-k25-eagle3.yaml").read_text()
    demo = demo.replace("slug: kimi-k25-eagle3", "slug: kimi-at-14k").replace("bytes: 57344", "bytes: 14336")
    with session_scope(app_state(app).engine) as session:  # the baseline figure at the decode step's own 14 KiB
        import_campaign(session, demo, actor="test")
    text = " ".join(re.sub(r"<[^>]+>", " ", _status_page(operator_client, client, "kimi-at-14k")).split())
    assert (
        "Contradictory inputs" in text and "122 allreduces x 200 us at the decode step&#39;s 14 KiB = 24.4 ms" in text
    )
