"""Scale: the charts page, the what-if, the status page and its export, the payoff ranking (API and panel) read a campaign in a fixed number of
SQL statements, whatever its number of approaches and trials (issue 12: no per-approach queries)."""

from __future__ import annotations

import re
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import event
from sqlmodel import col, select

from app.db import session_scope
from app.domain import campaigns
from app.models import Replay, StatusChange, Trial
from app.schemas import ApproachCreate, CampaignCreate, RecipeSpec
from app.state import app_state
from tests.support.charts import add_metrics

pytestmark = pytest.mark.both_databases  # query counts

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _build(engine, slug: str, approaches: int, trials_each: int) -> None:
    """A campaign of allreduce, verify-step and speculative SGLang approaches with trials, metrics and history."""
    with session_scope(engine) as s:
        campaign = campaigns.create_campaign(
            s,
            CampaignCreate(
                slug=slug,
                name=slug,
                baseline_tok_s=82.0,
                accept_length=2.4,
                draft_steps=3,
                draft_step_ms=0.5,
                verify_compute_ms=9.0,
            ),
        )
        assert campaign.id is not None
        for i in range(approaches):
            approach = campaigns.add_approach(
                s,
                campaign,
                ApproachCreate(key=f"a{i}", title=f"approach {i}", recipe=RecipeSpec(kind="allreduce")),
                "t",
            )
            assert approach.id is not None
            for j in range(trials_each):
                at = T0 + timedelta(hours=i * trials_each + j)
                trial = Trial(
                    campaign_id=campaign.id,
                    approach_id=approach.id,
                    recipe={},
                    state="succeeded",
                    created_at=at,
                    started_at=at,
                    finished_at=at + timedelta(minutes=5),
                )
                s.add(trial)
                s.flush()
                assert trial.id is not None
                kind = i % 3
                if kind == 0:
                    metrics = [
                        ("allreduce_latency_us", 10.0 + i + j, {"bytes": b, "mode": "graph", "device": "cuda"})
                        for b in (14336, 114688)
                    ]
                elif kind == 1:
                    metrics = [
                        ("allreduce_in_situ_us", 20.0 + j, {"tokens": 4, "device": "cuda"}),
                        ("verify_compute_ms", 9.0, {"tokens": 4, "device": "cuda"}),
                    ]
                else:
                    metrics = [
                        ("output_throughput_tok_s", 80.0 + j, {}),
                        ("median_tpot_ms", 9.0, {}),
                        ("accept_length", 2.5, {}),
                    ]
                add_metrics(s, trial, metrics)
                s.add(
                    StatusChange(
                        approach_id=approach.id,
                        from_status="untested",
                        to_status="promising",
                        reason=f"trial {j}",
                        at=at + timedelta(minutes=6),
                    )
                )
            s.flush()


@contextmanager
def _counting(engine):
    statements: list[str] = []

    def count(conn, cursor, statement, *args):
        # Transaction control differs with the connection's state, not with the data: only queries count.
        text = " ".join(statement.split())
        if not text.upper().startswith(("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")):
            statements.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        yield statements
    finally:
        event.remove(engine, "before_cursor_execute", count)


def _quiet(app, client) -> None:
    """Stop the app's background loops (lost-runner sweep, the notifier's half-second poll, change points, the
    trace reader): they share the engine, and a page that took longer than a poll counted one statement more
    (CI under load: the large campaign's status export 25, the small one's 24). What is counted is the page's."""

    async def cancel() -> None:
        for task in app_state(app).tasks.values():
            task.cancel()
        for task in app_state(app).tasks.values():
            with suppress(BaseException):
                await task

    client.portal.call(cancel)


def _replay(engine, slug: str) -> int:
    """A finished replay over every approach of the campaign: before its first trial, after its last (the
    report compares each pair)."""
    with session_scope(engine) as s:
        campaign = campaigns.get_campaign(s, slug)
        row = Replay(campaign_id=campaign.id or 0, runner_name="node-b", runner_fingerprint={"torch": "2.11.0"})
        row.state = "finished"
        s.add(row)
        s.flush()
        entries = []
        for approach in campaigns.approaches(s, campaign):
            mine = s.exec(select(Trial).where(Trial.approach_id == approach.id).order_by(col(Trial.id))).all()
            mine[-1].replay_id = row.id
            s.add(mine[-1])
            entries.append(
                {"approach_id": approach.id, "key": approach.key, "title": approach.title, "status": "promising",
                 "reason": "r", "trial_id": mine[0].id, "stack": "torch 2.10.0", "bound": None, "retest": "re-test",
                 "replay_trial_id": mine[-1].id}
            )  # fmt: skip
        row.entries = entries
        s.add(row)
        s.flush()
        assert row.id is not None
        return row.id


def _share_path(operator, slug: str) -> str:
    r = operator.post(f"/campaigns/{slug}/share-links", data={"name": "q"}, headers={"HX-Request": "true"})
    found = re.search(r'class="share-url" readonly value="http://127.0.0.1([^"]+)"', r.text)
    assert found is not None, r.text
    return found.group(1)


def _counts(app, operator, slug: str, replay_id: int) -> dict[str, int]:
    share = _share_path(operator, slug)
    pages = {
        "charts": f"/campaigns/{slug}/charts",
        "what-if": f"/campaigns/{slug}/charts/whatif?accept_length=3.1",
        "status": share,
        "status export": share + "/export.html",
        "ranking": f"/api/campaigns/{slug}/ranking",
        "ranking panel": f"/campaigns/{slug}/ranking",
        "upgrades": f"/api/campaigns/{slug}/upgrades?target=torch=2.11.0&target=cuda=13.0",
        "upgrades page": f"/campaigns/{slug}/upgrades?torch=2.11.0&cuda=13.0",
        "replay report": f"/api/campaigns/{slug}/replays/{replay_id}",
        "replay report page": f"/campaigns/{slug}/replays/{replay_id}",
    }
    out = {}
    for name, path in pages.items():
        operator.get(path)  # warm: one-time work (session, caches) is not what is measured
        with _counting(app_state(app).engine) as statements:
            r = operator.get(path)
        assert r.status_code == 200, (name, r.text[:500])
        out[name] = len(statements)
    return out


def _close_some(engine, slug: str) -> None:
    """Every third approach a dead end bound to torch with a team's note, every fifth one succeeded on a newer
    torch: the upgrade planner then reads notes, successes and the re-opened approaches' ranking."""
    with session_scope(engine) as s:
        for n, approach in enumerate(campaigns.approaches(s, campaigns.get_campaign(s, slug))):
            if n % 3 == 0:
                approach.status, approach.reason = "dead_end", "KeyError: 12; needs torch >= 2.11"
                approach.bound_to = {"components": ["torch", "sm"]}
                approach.verdict_fingerprint = {"torch": "2.10.0", "sm": "12.0", "cuda": "12.8"}
            elif n % 5 == 0:
                approach.bound_to = {"components": ["torch"]}
                approach.verdict_fingerprint = {"torch": "2.11.0", "sm": "12.0"}
            s.add(approach)


def test_queries_per_page_do_not_grow_with_approaches_or_trials(app, operator_client):
    _quiet(app, operator_client)
    _build(app_state(app).engine, "small", approaches=5, trials_each=2)
    _build(app_state(app).engine, "large", approaches=50, trials_each=6)
    _close_some(app_state(app).engine, "small")
    _close_some(app_state(app).engine, "large")
    small = _counts(app, operator_client, "small", _replay(app_state(app).engine, "small"))
    large = _counts(app, operator_client, "large", _replay(app_state(app).engine, "large"))
    assert small == large, (small, large)
    assert max(small.values()) < 40, small


def test_large_campaign_still_answers(app, operator_client):
    _build(app_state(app).engine, "large", approaches=30, trials_each=3)
    html = operator_client.get("/campaigns/large/charts").text
    assert "EAGLE-3 now" in html and 'id="break-even-tau"' in html
    # The timeline is windowed to the most recently active approaches, trials aggregated.
    assert "most recently active of 30 approaches" not in html  # 30 fit the window
    assert len(re.findall(r'"name": ?"trials"', html)) == 1
