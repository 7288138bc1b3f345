"""The change points on the approach page and the campaign's "Changes" panel (SQLite and PostgreSQL): the
pass runs off the request path and publishes the approach and campaign topics; the fragments show the
change with its ratio, interval and stack diff, the series chart marks it, an adopted approach's page
proposes re-opening it."""

from __future__ import annotations

import asyncio
import json
import re

import numpy as np
import plotly.io as pio
import pytest

from app.db import session_scope
from app.domain.runners import mark_connected
from app.models import ApproachStatus
from app.services import changes as changes_service
from app.services import events
from app.state import app_state
from tests.support.verdicts import NEW_TORCH, OLD_STACK, approach, end_trial, runner, seed


async def _idle(app) -> None:  # the lifespan's own pass stays out of the way: the test runs the pass itself
    await asyncio.Event().wait()


@pytest.fixture(autouse=True)
def _no_background_pass(monkeypatch):
    monkeypatch.setattr(changes_service, "run", _idle)


def _line(value: float, seed_: int) -> dict:
    samples = [float(x) for x in np.random.default_rng(seed_).normal(value, value * 0.01, 10)]
    return {"name": "output_throughput", "value": value, "unit": "tok/s", "tags": {}, "samples": samples}


def test_a_throughput_drop_after_a_torch_upgrade_reaches_both_pages(operator_client, app, monkeypatch):
    engine = app_state(app).engine
    seed(engine, {"key": "nccl", "title": "NCCL <ring>"})
    with session_scope(engine) as s:
        node = runner(s, "node-a", OLD_STACK)
        a = approach(s, "nccl")
        for i in range(8):
            end_trial(s, a, node, metrics=[_line(82.0, i)])
        mark_connected(s, node, NEW_TORCH, [])
        for i in range(8):
            end_trial(s, a, node, metrics=[_line(74.0, 50 + i)])
        a.status = ApproachStatus.adopted
        s.add(a)
        ids = (a.id, a.campaign_id)
    r = operator_client.get("/campaigns/c/approaches/nccl/changes")
    assert r.status_code == 200 and "No change points" in r.text  # nothing is detected on a page's request

    published: list[tuple[str, ...]] = []
    monkeypatch.setattr(events, "publish", lambda _app, *topics: published.append(topics))
    assert asyncio.run(changes_service.pass_once(app)) == 1
    assert published == [tuple(sorted((events.approach(ids[0]), events.campaign(ids[1]))))]

    r = operator_client.get("/campaigns/c/approaches/nccl/changes")
    assert r.status_code == 200
    assert 'hx-trigger="feed:approach, feed-stale"' in r.text
    assert "output_throughput slower x0.90" in r.text and "torch 2.10.0+cu128 -&gt; 2.11.0" in r.text
    assert re.search(r'data-proposal="reopen"><strong>Proposal:</strong> Re-open nccl', r.text)
    found = re.search(r'<script type="application/json" id="figure-changes-1">(.*?)</script>', r.text, re.S)
    assert found
    figure = json.loads(found.group(1))
    pio.from_json(json.dumps(figure), skip_invalid=False)  # Plotly's own validators (tests/charts/test_chart_schema.py)
    series, marked = figure["data"]
    assert len(series["y"]) == 16 and marked["x"] == [9] and marked["name"] == "slower (change point)"

    r = operator_client.get("/campaigns/c/changes")
    assert r.status_code == 200 and 'hx-trigger="feed:campaign, feed-stale"' in r.text
    assert '<a href="/campaigns/c/approaches/nccl">nccl</a>: output_throughput slower' in r.text
    page = operator_client.get("/campaigns/c/approaches/nccl").text
    assert 'hx-get="/campaigns/c/approaches/nccl/changes" hx-trigger="load"' in page
    assert 'hx-get="/campaigns/c/changes" hx-trigger="load"' in operator_client.get("/campaigns/c").text


def test_unknown_approach_or_campaign_is_a_404(operator_client):
    assert operator_client.get("/campaigns/nope/changes").status_code == 404
    assert operator_client.get("/campaigns/nope/approaches/x/changes").status_code == 404
