"""The planning API and the campaign page's "What to try next" panel, on SQLite and PostgreSQL, on the Kimi
demo: the FlashInfer PCIe-IPC allreduce ranks first (its docstring's 5.3 us against the baseline's 200 us);
the order "Run next" follows can be pinned and released; bad input is a clear error."""

from __future__ import annotations

import pytest

from app.db import session_scope
from app.domain.demo import load_demo
from app.state import app_state

SLUG = "kimi-k25-eagle3"


@pytest.fixture
def demo_client(app, operator_client):
    with session_scope(app_state(app).engine) as s:
        load_demo(s)
    return operator_client


def test_ranking_of_the_kimi_demo(demo_client):
    r = demo_client.get(f"/api/campaigns/{SLUG}/ranking")
    assert r.status_code == 200, r.text
    ranking = r.json()
    # The three untested approaches (no runner is connected: no re-test flag); only one has a figure.
    assert [x["key"] for x in ranking] == ["flashinfer-pcie-ipc-allreduce", "expert-parallelism", "nccl-p2p-level-sys"]
    top = ranking[0]
    assert top["expected"]["t_ar_us"] == 5.3 and top["expected"]["source"] == "reported"
    assert top["needs"] == {
        "bytes": 57344,
        "us": 200.0,
        "beat_best_us": 200.0,
        "beat_best_of": "NCCL on PCIe (the baseline) (200 us)",
        "pay_us": None,  # the accept length is not known in the seed
        "pay_exact": False,
        "tau": None,
    }
    assert top["effort"] == 1.0 and top["risk"] == pytest.approx(2 / 3)
    assert top["score"] == pytest.approx((200 - 5.3) * 122 / 1000 * (1 / 3) / 1.0)
    assert "needs <= 200 us at 56 KiB to beat NCCL on PCIe (the baseline) (200 us)" in top["reasons"]
    assert [x["score"] for x in ranking[1:]] == [None, None]


def test_the_panel_says_why_this_one_next_and_the_order_can_be_pinned(demo_client):
    html = demo_client.get(f"/campaigns/{SLUG}/ranking").text
    assert "<b>FlashInfer PCIe-IPC allreduce</b> next: needs &lt;= 200 us at 56 KiB; expected 5.3 us (reported)" in html
    assert '<option value="ranking" selected>' in html
    r = demo_client.post(f"/campaigns/{SLUG}/run-order", data={"order": "priority"}, headers={"HX-Request": "true"})
    assert r.status_code == 200 and r.headers["HX-Trigger"] == "campaign-changed"
    assert '<option value="priority" selected>' in r.text and "The order is pinned by hand" in r.text
    assert demo_client.put(f"/api/campaigns/{SLUG}/run-order", json={"order": "ranking"}).json() == {"order": "ranking"}
    # The campaign page loads the panel.
    assert f'hx-get="/campaigns/{SLUG}/ranking"' in demo_client.get(f"/campaigns/{SLUG}").text


def test_moving_an_approach_by_hand_pins_the_priority_order(demo_client):
    r = demo_client.post(f"/api/campaigns/{SLUG}/approaches/nccl-p2p-level-sys/move", json={"position": 1})
    assert r.status_code == 200, r.text
    assert '<option value="priority" selected>' in demo_client.get(f"/campaigns/{SLUG}/ranking").text


def test_bad_input(demo_client):
    r = demo_client.put(f"/api/campaigns/{SLUG}/run-order", json={"order": "random"})
    assert r.status_code == 422 and "order" in r.text
    r = demo_client.post(f"/campaigns/{SLUG}/run-order", data={"order": "random"}, headers={"HX-Request": "true"})
    assert r.status_code == 422 and "expected one of ranking, priority" in r.text
    assert demo_client.get("/api/campaigns/nope/ranking").status_code == 404


def test_upgrades_api_on_the_kimi_demo(demo_client):
    r = demo_client.get(f"/api/campaigns/{SLUG}/upgrades", params=[("target", "torch=2.11.0"), ("target", "cuda=13.0")])
    assert r.status_code == 200, r.text
    body = r.json()
    assert [x["key"] for x in body["reopens"]] == ["flashinfer-allreduce-fusion", "torch-symm-mem"]
    assert {x["key"] for x in body["untouched"]} == {
        "sglang-custom-allreduce",
        "nccl-tree",
        "nccl-fewer-channels",
        "mscclpp",
    }
    per = demo_client.get(f"/api/campaigns/{SLUG}/upgrades").json()
    assert per["reopens"] == [] and "torch" in {c["component"] for c in per["components"]}
    bad = demo_client.get(f"/api/campaigns/{SLUG}/upgrades", params={"target": "torch"})
    assert bad.status_code == 422 and bad.json()["field"] == "target"
    assert demo_client.get(f"/api/campaigns/{SLUG}/upgrades", params={"runner": 999}).status_code == 404


def test_upgrades_page_on_the_kimi_demo(demo_client):
    page = demo_client.get(f"/campaigns/{SLUG}/upgrades", params={"torch": "2.11.0", "cuda": "13.0"})
    assert page.status_code == 200
    html = page.text
    assert "<h2>CUDA 12.8 → 13.0, torch 2.10.0+cu128 → 2.11.0</h2>" in html
    reopens = html[html.index('id="upgrade-reopens"') : html.index('id="upgrade-untouched"')]
    assert 'data-key="flashinfer-allreduce-fusion"' in reopens and 'data-key="torch-symm-mem"' in reopens
    assert 'data-key="nccl-tree"' not in reopens
    untouched = html[html.index('id="upgrade-untouched"') : html.index('id="upgrade-components"')]
    assert "bound to NCCL, which the target does not change" in untouched
    assert "not bound to any stack component (38 tok/s vs 82 tok/s NCCL" in untouched
    assert 'id="upgrade-result"' not in demo_client.get(f"/campaigns/{SLUG}/upgrades").text  # no target yet
    assert f'href="/campaigns/{SLUG}/upgrades"' in demo_client.get(f"/campaigns/{SLUG}").text
    bad = demo_client.get(f"/campaigns/{SLUG}/upgrades", params={"runner": "x"})
    assert bad.status_code == 422
