"""The compare page (server-rendered) on SQLite and PostgreSQL: the chart's figure JSON carries every
trial's values, the stack table marks differing components, text is escaped, bad picks are 4xx pages;
the campaign's trial list and the trial page lead to it."""

from __future__ import annotations

import html
import json
import re

import numpy as np
import pytest

from app.db import session_scope
from app.domain.logs import dropped_marker
from app.state import app_state
from app.templating import asset_url
from tests.support.seeded_trials import seed_trials
from tests.support.verdicts import OLD_STACK, approach, end_trial, read_every_proposal, runner, seed


@pytest.fixture
def page_client(operator_client, app):
    seeded = seed_trials(app_state(app).engine)
    return operator_client, seeded


def _figure(html: str) -> dict:
    found = re.search(r'<script type="application/json" id="figure-compare">(.*?)</script>', html, re.S)
    assert found, "no figure JSON on the page"
    return json.loads(found.group(1))


def test_compare_page_overlays_metrics_and_diffs_stacks(page_client):
    client, seeded = page_client
    a, b = seeded.trial_ids[0], seeded.trial_ids[3]
    r = client.get(f"/campaigns/c/compare?trial={a}&trial={b}")
    assert r.status_code == 200, r.text
    figure = _figure(r.text)
    traces = {t["meta"]["trial_id"]: t for t in figure["data"]}
    assert traces[a]["y"] == [1.0, 8.0, 64.0] and traces[b]["y"] == [31.0, 38.0, 94.0]
    assert traces[a]["x"] == [1, 8, 64] and figure["layout"]["xaxis"]["type"] == "log"
    # Titles go to Plotly escaped (it reads a subset of HTML in names) and to the page escaped by Jinja.
    assert traces[a]["name"] == f"#{a} Approach &lt;A&gt;"
    assert "Approach <A>" not in r.text and "Approach &lt;A&gt;" in r.text
    torch = re.search(r'<tr data-component="torch" class="(\w+)">(.*?)</tr>', r.text, re.S)
    assert (
        torch and torch.group(1) == "differs" and "2.10.0+cu128" in torch.group(2) and "2.11.0+cu130" in torch.group(2)
    )
    gpu = re.search(r'<tr data-component="gpu" class="(\w+)">', r.text)
    assert gpu and gpu.group(1) == "same"
    assert f'<script src="{asset_url("compare.js")}" defer></script>' in r.text
    assert not re.search(r"<script>(?!</script>)", r.text)  # no inline code: data islands only


def test_one_trial_shows_the_picker_with_it_ticked(page_client):
    client, seeded = page_client
    tid = seeded.trial_ids[2]
    r = client.get(f"/campaigns/c/compare?trial={tid}")
    assert r.status_code == 200 and "figure-compare" not in r.text
    assert f'name="trial" value="{tid}" checked' in r.text
    assert r.text.count('name="trial"') == len(seeded.trial_ids)


@pytest.mark.parametrize(
    "query,status,words",
    [
        ("trial=1&trial=424242", 404, "#424242"),
        ("trial=1&trial=x", 422, "trial"),
        ("trial=1&trial=2&trial=3&trial=4&trial=5&trial=6&trial=7&trial=8&trial=9", 422, "between 2 and 8"),
    ],
)
def test_bad_picks_are_error_pages(page_client, query, status, words):
    client, _ = page_client
    r = client.get(f"/campaigns/c/compare?{query}")
    assert r.status_code == status and words in r.text


def test_campaign_trials_and_trial_page_lead_to_compare(page_client):
    client, seeded = page_client
    rows = client.get("/campaigns/c/trials").text
    assert 'action="/campaigns/c/compare"' in rows
    for tid in seeded.trial_ids:
        assert f'name="trial" value="{tid}"' in rows
    page = client.get(f"/trials/{seeded.trial_ids[0]}").text
    assert f'href="/campaigns/c/compare?trial={seeded.trial_ids[0]}"' in page


def test_approaches_side_by_side_with_settle_and_the_feeds_refresh(operator_client, app):
    """?approach=a&approach=b holds each approach's succeeded trials; the Settle form queues a first round
    and shows the comparison; the page feed's refresh (HX-Request) gets the metrics block alone."""
    seed(app_state(app).engine, {"key": "a"}, {"key": "b"}, slug="p")
    with session_scope(app_state(app).engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        for key, center in (("a", 10.0), ("a", 10.0), ("b", 9.0)):
            raw = [float(x) for x in np.random.default_rng(int(center * 10)).normal(center, 0.05, 10)]
            line = {"name": "verify_time_ms", "value": float(np.median(raw)), "unit": "ms", "samples": raw}
            end_trial(s, approach(s, key, "p"), node, metrics=[line])
    r = operator_client.get("/campaigns/p/compare?approach=a&approach=b")
    assert r.status_code == 200, r.text
    assert 'id="compare-columns"' in r.text and "2 trials" in r.text and "1 trial" in r.text
    assert "samples pooled" not in r.text and "each trial one observation" in r.text  # as the statistics do
    # B has one trial and no run-to-run spread is known: no verdict, said so (issue 32 item 10, issue 34).
    assert 'data-verdict="no_verdict"' in r.text and "no difference can be claimed" in r.text
    assert "indistinguishable" not in r.text and "2 trials · n=20" in r.text and "1 trial · n=10" in r.text
    assert "Settle a vs b" in r.text

    r = operator_client.get("/campaigns/p/compare?approach=a&approach=b", headers={"HX-Request": "true"})
    assert r.text.lstrip().startswith('<section class="card" id="compare-metrics"') and "<html" not in r.text
    assert 'hx-trigger="feed:campaign, feed-stale"' in r.text

    with session_scope(app_state(app).engine) as s:
        read_every_proposal(s, "p")
    r = operator_client.post("/campaigns/p/settle", data={"a": "a", "b": "b", "budget": "3"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/campaigns/p/compare?approach=a&approach=b"
    queued = operator_client.get("/api/campaigns/p/queue").json()
    assert [q["approach"] for q in queued] == ["a", "b"]
    page = operator_client.get(r.headers["location"]).text
    assert 'data-settle-state="open"' in page and "0 trials of 3" not in page and "2 trials of 3" in page

    r = operator_client.post("/campaigns/p/settle", data={"a": "a", "budget": "99"}, follow_redirects=False)
    assert r.status_code == 422


def test_two_trials_of_one_approach_get_no_verdict_and_a_repeat_button(operator_client, app):
    """Issue 32 item 10: "indistinguishable x2.292 one sample a side" said a verdict it could not give."""
    seed(app_state(app).engine, {"key": "a"}, slug="q")
    with session_scope(app_state(app).engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        line = lambda v: {"name": "verify_time_ms", "value": v, "unit": "ms"}  # noqa: E731
        ids = [end_trial(s, approach(s, "a", "q"), node, metrics=[line(v)]).id for v in (1.0, 2.292)]
    page = operator_client.get(f"/campaigns/q/compare?trial={ids[0]}&trial={ids[1]}").text
    assert 'data-verdict="no_verdict"' in page and "×2.292" in page and "no verdict" in page
    assert "indistinguishable" not in page and "repeat to decide" in page
    assert '<button type="submit">Repeat a</button>' in page and 'class="inline-form repeat-form"' in page


def test_the_trial_page_hands_livelog_the_dropped_bytes_marker(page_client):
    """static/livelog.js tells the size-cap marker from log text by the parts the page gives it (data attribute)."""
    client, seeded = page_client
    page = client.get(f"/trials/{seeded.trial_ids[0]}").text
    found = re.search(r'data-dropped-marker="([^"]*)"', page)
    assert found is not None
    parts = json.loads(html.unescape(found.group(1)))
    assert parts["start"] + "12,345" + parts["words"] == dropped_marker(12345)


def test_verdict_cells_escape_what_runners_and_people_wrote(operator_client, app):
    """The values table's cells are built as HTML in Python (web.compare.metric_table): a runner's reported
    stack (the cell's stack difference) and an approach's title (the run-to-run spread's note) come out
    escaped, never as markup."""
    seed(app_state(app).engine, {"key": "a", "title": "A <i>spread</i>"}, {"key": "b"}, slug="x")
    odd = {**OLD_STACK, "hostname": "node-z", "torch": "<b>2.11</b>"}
    with session_scope(app_state(app).engine) as s:
        old, new = runner(s, "node-a", OLD_STACK), runner(s, "node-z", odd)
        line = lambda v: {"name": "verify_time_ms", "value": v, "unit": "ms", "samples": [v, v * 1.001]}  # noqa: E731
        earlier = [end_trial(s, approach(s, "a", "x"), old, metrics=[line(v)]).id for v in (10.0, 10.1, 9.9)]
        a = end_trial(s, approach(s, "a", "x"), old, metrics=[line(10.0)]).id
        b = end_trial(s, approach(s, "b", "x"), old, metrics=[line(9.0)]).id
        c = end_trial(s, approach(s, "b", "x"), new, metrics=[line(9.5)]).id
    assert earlier
    page = operator_client.get(f"/campaigns/x/compare?trial={a}&trial={b}&trial={c}&across_stacks=true").text
    cells = re.findall(r'<td class="verdict-cell small" data-verdict="(\w+)">(.*?)</td>', page, re.S)
    assert len(cells) == 2, cells
    spread_note = html.unescape(cells[0][1])
    assert "run-to-run spread" in spread_note and "A <i>spread</i>" in spread_note
    assert "<i>spread</i>" not in cells[0][1] and "&lt;i&gt;spread&lt;/i&gt;" in cells[0][1]
    assert "&lt;b&gt;2.11&lt;/b&gt;" in cells[1][1] and "<b>2.11</b>" not in page


def test_the_conditions_the_columns_ran_under_are_listed(operator_client, app, api_headers, client):
    """Two trials at contexts 1,024 and 4,096 line up by batch and are compared as picked; the page and the
    API list the conditions, the context marked as differing."""
    seed(app_state(app).engine, {"key": "a"}, {"key": "b"}, slug="k")
    with session_scope(app_state(app).engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        line = lambda v, ctx: {  # noqa: E731
            "name": "decode_step_ms",
            "value": v,
            "unit": "ms",
            "tags": {"batch": 1, "context": ctx, "mode": "graph"},
            "samples": [v, v * 1.01, v * 0.99],
        }
        a = end_trial(s, approach(s, "a", "k"), node, metrics=[line(10.0, 1024)]).id
        b = end_trial(s, approach(s, "b", "k"), node, metrics=[line(14.0, 4096)]).id
    page = operator_client.get(f"/campaigns/k/compare?trial={a}&trial={b}").text
    context = re.search(r'<tr data-condition="context" class="(\w+)">(.*?)</tr>', page, re.S)
    assert context and context.group(1) == "differs" and "1024" in context.group(2) and "4096" in context.group(2)
    assert re.search(r'<tr data-condition="mode" class="same">', page)
    body = client.get(f"/api/campaigns/k/compare?trial={a}&trial={b}", headers=api_headers).json()
    assert {c["component"]: c["values"] for c in body["conditions"]} == {
        "mode": ["graph", "graph"],
        "context": ["1024", "4096"],
    }
    assert [r["values"] for r in body["metrics"][0]["rows"]] == [[10.0, 14.0]]
