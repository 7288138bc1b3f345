"""The answer's one cache (issue 46 item 1): keyed by (database, campaign, query, data version), the version read
with one query before any metric is, so a page shown again with nothing new reads no metrics; a new metric, a
changed approach or campaign setting, an uploaded trace recompute it; each what-if, the t_ar one too, is its own
entry, laid over the answer in the domain; the cache is bounded."""

from __future__ import annotations

import pytest

from app.domain import campaigns
from app.domain.answer import read
from app.domain.answer.inputs import WhatIf
from app.domain.answer.query import AnswerQuery
from app.domain.answer.read import read_answer
from app.domain.answer.report import T_AR_LABEL
from app.models import utcnow
from tests.support.speculation import build_sweep_campaign


@pytest.fixture
def computed(monkeypatch):
    """How many times the answer was computed, and the metrics read for it."""
    calls = {"compute": 0, "metrics": 0}
    compute, load = read._compute, read.load_campaign_metrics

    def counting_compute(*args, **kwargs):
        calls["compute"] += 1
        return compute(*args, **kwargs)

    def counting_load(*args, **kwargs):
        calls["metrics"] += 1
        return load(*args, **kwargs)

    monkeypatch.setattr(read, "_compute", counting_compute)
    monkeypatch.setattr(read, "load_campaign_metrics", counting_load)
    return calls


def test_the_same_query_twice_is_computed_once_and_reads_no_metrics_again(session, computed):
    campaign = build_sweep_campaign(session, slug="cache-once", r=3).campaign
    first = read_answer(session, campaign)
    assert read_answer(session, campaign, AnswerQuery()) is first
    assert computed == {"compute": 1, "metrics": 1}


def test_a_new_metric_a_changed_approach_or_setting_recomputes(session, computed):
    b = build_sweep_campaign(session, slug="cache-changes", r=3)
    campaign = b.campaign
    first = read_answer(session, campaign)
    verify = campaigns.approaches(session, campaign)[0]
    b.trial(verify, [("decode_step_ms", 10.0, {"batch": 1, "world_size": 2}, [10.0, 10.1])])
    second = read_answer(session, campaign)
    assert second is not first
    verify.title = "renamed"
    verify.updated_at = utcnow()  # as every edit through inventory does
    session.flush()
    third = read_answer(session, campaign)
    assert third is not second and any(a.title == "renamed" for a in third.approaches)
    verify.position = 7  # what changes without updated_at (a reorder) is in the version as well
    session.flush()
    fourth = read_answer(session, campaign)
    assert fourth is not third
    campaign.stats_min_effect = 0.07
    session.flush()
    assert read_answer(session, campaign) is not fourth
    assert computed["compute"] == 5


def test_each_what_if_and_t_ar_is_its_own_entry_laid_in_the_domain(session, computed):
    campaign = build_sweep_campaign(session, slug="cache-what-if", r=3).campaign
    plain = read_answer(session, campaign)
    fast = read_answer(session, campaign, AnswerQuery(t_ar_us=1.0))
    slow = read_answer(session, campaign, AnswerQuery(t_ar_us=500.0))
    assert len({id(plain), id(fast), id(slow)}) == 3
    assert plain.t_ar_us is None and plain.report.references[:1] != fast.report.references[:1]
    assert fast.report.references[0].label == T_AR_LABEL and fast.report.references[0].latency.t_ar_us == 1.0
    assert fast.report.points == () and fast.t_ar_us == 1.0
    tried = AnswerQuery(what_if=WhatIf(accept_length=1.2), t_ar_us=1.0)
    assert read_answer(session, campaign, tried) is read_answer(session, campaign, tried)
    assert computed["compute"] == 4


def test_the_cache_is_bounded(session, monkeypatch):
    campaign = build_sweep_campaign(session, slug="cache-bound", r=2).campaign
    monkeypatch.setattr(read, "_CACHE_SIZE", 3)
    for t_ar in (1.0, 2.0, 3.0, 4.0, 5.0):
        read_answer(session, campaign, AnswerQuery(t_ar_us=t_ar))
    assert len(read._CACHE) == 3
    kept = [query.t_ar_us for _database, _campaign, query, _version in read._CACHE if isinstance(query, AnswerQuery)]
    assert kept == [3.0, 4.0, 5.0]  # the least recently read went first
