"""Pages do not run a query per row: the number of SQL statements a page runs is the same for a small
campaign and for one with 4x the approaches and 30x the trials and history (bench/pages_at_scale.py
builds both with bulk inserts through the SQLModel tables)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select
from sqlmodel import Session, col

from app.domain import history
from app.models import Approach, Campaign, StatusChange, Trial
from app.state import app_state
from bench.pages_at_scale import StatementCounter, build_campaign

pytestmark = pytest.mark.both_databases  # paged lists' SQL and query counts

PAGES = [
    "/campaigns/{slug}",
    "/campaigns/{slug}/inventory",
    "/campaigns/{slug}/trials",
    "/campaigns/{slug}/verdicts",
    "/campaigns/{slug}/approaches/{key}",
    "/campaigns/{slug}/approaches/{key}/history?before={change}",
    "/campaigns/{slug}/approaches/{key}/trials",
    "/campaigns/{slug}/approaches/{key}/trials?before={trial}",
    "/trials/{trial}",
    "/api/trials/{trial}",
    "/api/campaigns/{slug}/approaches/{key}/history",
    "/api/campaigns/{slug}/approaches/{key}/history?before={change}&limit=20",
    "/campaigns/{slug}/metrics.csv",
    "/campaigns/{slug}/export.yaml",
    "/api/trials",
    "/api/trials?campaign={slug}&limit=200",
    "/api/trials?campaign={slug}&approach={key}&state=succeeded&before={trial}",
    "/api/trials/{trial}/metrics",
    "/api/runners",
    "/api/campaigns/{slug}/share-links",
    "/api/campaigns/{slug}/compare?trial={trial}&trial={newest_trial}",
    "/campaigns/{slug}/compare?trial={trial}&trial={newest_trial}",
    "/campaigns/{slug}/charts",
    "/campaigns/{slug}/charts/whatif?accept_length=3.5&verify_tokens=8",
]


def _ids(engine, slug: str) -> dict[str, Any]:
    with Session(engine) as session:
        cid = session.execute(select(col(Campaign.id)).where(col(Campaign.slug) == slug)).scalar()
        first = session.execute(
            select(col(Approach.key), col(Approach.id))
            .where(col(Approach.campaign_id) == cid)
            .order_by(col(Approach.position))
        ).first()
        assert first is not None
        key, approach_id = first
        trials = list(
            session.execute(
                select(col(Trial.id)).where(col(Trial.approach_id) == approach_id).order_by(col(Trial.id).desc())
            ).scalars()
        )
        changes = list(
            session.execute(
                select(col(StatusChange.id))
                .where(col(StatusChange.approach_id) == approach_id)
                .order_by(col(StatusChange.at).desc(), col(StatusChange.id).desc())
            ).scalars()
        )
    return {
        "slug": slug,
        "key": key,
        "trial": trials[len(trials) // 2],
        "newest_trial": trials[0],
        "change": changes[len(changes) // 2],
        "trials": len(trials),
        "changes": len(changes),
    }


def _count(client, counter: StatementCounter, path: str) -> int:
    before = counter.count
    r = client.get(path)
    assert r.status_code == 200, (path, r.status_code, r.text[:300])
    return counter.count - before


@pytest.fixture
def quiet_client(app, api_headers):
    """Requests only: no lifespan, so no sweeper's statements are counted with the page's."""
    from fastapi.testclient import TestClient

    return TestClient(app, base_url="http://127.0.0.1", headers=api_headers)


def test_query_counts_do_not_grow_with_approaches_and_trials(quiet_client, app):
    operator_client = quiet_client
    engine = app_state(app).engine
    build_campaign(engine, "small", approaches=3, trials=6, metrics_per_trial=3)
    build_campaign(engine, "large", approaches=12, trials=1440, metrics_per_trial=3)
    small, large = _ids(engine, "small"), _ids(engine, "large")
    assert large["trials"] > 100 and large["changes"] > 300  # past every page size: bounded pages show
    counter = StatementCounter(engine)
    grown = {}
    for page in PAGES:
        counts = (
            _count(operator_client, counter, page.format(**small)),
            _count(operator_client, counter, page.format(**large)),
        )
        if counts[0] != counts[1]:
            grown[page] = counts
    assert not grown, f"statements per page grew with the campaign (small, large): {grown}"


@pytest.mark.parametrize(
    "path,rows",
    [
        ("/campaigns/large/approaches/{key}", "<time datetime"),
        ("/campaigns/large/approaches/{key}/trials", '<tr id="trial-'),
    ],
)
def test_lists_are_paged_latest_first_and_more_loads_the_rest(operator_client, app, path, rows, monkeypatch):
    monkeypatch.setattr(history, "MAX_ROWS", 100)  # the bench's history is trial events alone: pages of 100
    engine = app_state(app).engine
    build_campaign(engine, "large", approaches=2, trials=240)
    ids = _ids(engine, "large")
    seen = []
    r = operator_client.get(path.format(**ids))
    while True:
        assert r.status_code == 200, r.text[:300]
        page = r.text
        seen.append(page.count(rows))
        if 'class="more"' not in page:
            break
        more = page[page.index('hx-get="', page.index('class="more"')) + 8 :]
        r = operator_client.get(more[: more.index('"')].replace("&amp;", "&"), headers={"HX-Request": "true"})
    history_page = rows == "<time datetime"
    total = ids["changes"] if history_page else ids["trials"]
    # the history pages at decisions (app/domain/history.py): a page of trial events alone stops at MAX_ROWS
    assert sum(seen) == total and max(seen) <= (history.MAX_ROWS if history_page else 50) and len(seen) > 1, seen
