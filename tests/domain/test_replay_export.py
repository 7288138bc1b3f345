"""A replay travels in the campaign file (export --with-results, app/domain/replay.py's `replays` section), on
SQLite and PostgreSQL: exported, imported as another campaign, its report shows the same before/after rows
(statuses, reasons, stacks, the confirmed verdict, the comparison statistics), its trials found by their
results' identity; importing the file again adds no second replay; a plain export carries no replays."""

from __future__ import annotations

import pytest
import yaml
from sqlmodel import select

from app.db import session_scope
from app.domain import campaigns, queue, replay, verdicts
from app.domain.campaign_files import export_stream, import_campaign
from app.domain.errors import Invalid
from app.models import Replay, Trial
from tests.support.replay import build, latency
from tests.support.verdicts import NEW_TORCH, approach, campaign, run_to_end, runner

pytestmark = pytest.mark.both_databases  # import/export round trip


def _rows(report: replay.Report) -> list[dict]:
    rows = report.as_dict()["rows"]
    for row in rows:
        row["before"].pop("trial_id")  # ids differ on the other campaign; whether there is one does not
        row["after"].pop("trial_id")
    return rows


def _finished_replay(engine) -> None:
    build(engine)
    with session_scope(engine) as s:
        node_b = runner(s, "node-b", NEW_TORCH)
        row, _ = replay.start(s, campaign(s), node_b.id, "bob")  # type: ignore[arg-type]
        for n in range(3):
            started = queue.start_queued(s, node_b.id)  # type: ignore[arg-type]
            assert started is not None and started.trial is not None
            metrics = latency(40.0, seed=10 + n) if started.approach.key == "measured" else []  # type: ignore[union-attr]
            run_to_end(s, started.trial, metrics=metrics, exit_code=0 if metrics else 1)
        replay.advance_open(s)
        measured = next(e for e in row.entries if e["key"] == "measured")
        trial = s.get_one(Trial, measured["replay_trial_id"])
        verdicts.confirm(s, approach(s, "measured"), trial, "adopted", "40 us on torch 2.11", ["torch"], "alice")


def _as_copy(text: str) -> str:
    """The file as another campaign ('copy'); tests.support.replay's nccl_only key is not a file's key."""
    return text.replace("slug: c\n", "slug: copy\n", 1).replace("nccl_only", "nccl-only")


def test_a_replay_round_trips_through_the_campaign_file(engine):
    _finished_replay(engine)
    with session_scope(engine, write=False) as s:
        (row,) = replay.of_campaign(s, campaign(s))
        before = replay.report(s, campaign(s), row)
        text = "".join(export_stream(s, "c", with_results=True))
        plain = "".join(export_stream(s, "c"))
    assert "replays:" not in plain
    doc = yaml.safe_load(text)
    (item,) = doc["replays"]
    assert (item["runner"], item["requested_by"], item["state"]) == ("node-b", "bob", "finished")
    assert [e["approach"] for e in item["entries"]] == ["fast", "slow", "measured"]
    assert item["entries"][2]["after"] == "adopted" and "trial" in item["entries"][2]
    assert before.rows[2].after_status == "adopted" and before.rows[2].points  # the test can see a difference
    with session_scope(engine) as s:
        summary = import_campaign(s, _as_copy(text), actor="test").summary
    assert "replays: 1 added, 0 already here" in summary
    with session_scope(engine, write=False) as s:
        copy = campaigns.get_campaign(s, "copy")
        (other,) = replay.of_campaign(s, copy)
        after = replay.report(s, copy, other)
        assert other.runner_fingerprint == row.runner_fingerprint and other.created_at == row.created_at
        assert _rows(after) == _rows(before)
        assert (after.queued, after.ended) == (3, 3)
        assert all(r.trial_id is not None and r.before_trial_id is not None for r in after.rows)
        assert {t.replay_id for t in s.exec(select(Trial).where(Trial.campaign_id == copy.id))} >= {other.id}
        # The copy exports the same replays section (its trials by the same identities).
        again = yaml.safe_load("".join(export_stream(s, "copy", with_results=True)))
    assert again["replays"] == doc["replays"]
    with session_scope(engine) as s:
        summary = import_campaign(s, _as_copy(text), actor="test").summary
    assert "replays: 0 added, 1 already here" in summary
    with session_scope(engine, write=False) as s:
        assert len(s.exec(select(Replay)).all()) == 2


def test_a_replay_whose_trial_date_is_a_number_is_refused_naming_the_field(engine):
    text = """format: campaign-board/v1
campaign: {slug: x, name: X}
approaches:
- {key: a, title: A}
results: []
replays:
- runner: node-b
  state: finished
  created_at: '2026-01-01T00:00:00+00:00'
  entries:
  - approach: a
    status: dead_end
    trial: {created_at: '2026-01-01T00:00:00+00:00', finished_at: 0}
"""
    with session_scope(engine) as s:
        try:
            import_campaign(s, text, actor="test")
        except Invalid as exc:
            assert "line 13" in exc.message and "finished_at" in exc.message and "date" in exc.message, exc.message
        else:
            raise AssertionError("imported a number as a date")
