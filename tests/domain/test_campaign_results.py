"""Results that travel as measurements: `export --with-results` carries the ended trials with their metrics
(samples, tags, stack fingerprint, dates); an import keeps them as trials and metric rows, read by the
profitability report exactly as measured ones. Over SQLite and PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
import yaml
from sqlmodel import col, func, select

from app.db import session_scope
from app.domain import campaigns
from app.domain.answer import load_campaign_metrics
from app.domain.campaign_files import export_stream, import_campaign
from app.domain.errors import Invalid
from app.models import Campaign, Metric, Trial
from tests.support.paths import ROOT

pytestmark = pytest.mark.both_databases  # bulk metric insert, import/export round trip, times

FILE = """\
format: campaign-board/v1
campaign:
  slug: sweep
  name: A sweep
  hidden_size: 7168
  verify_tokens: 4
approaches:
- key: decode-graph
  title: Decode step in a graph
  status: untested
  recipe: {kind: verify_step, params: {backend: nccl, world_size: 1, mode: graph, batches: [1, 8], draft_tokens: [0]}}
- key: draft-graph
  title: Draft step in a graph
  status: untested
"""
FINGERPRINT = {"gpu_count": 1, "gpus": [{"name": "NVIDIA H200", "sm": "9.0"}], "torch": "2.11.0+cu130"}
T0 = datetime(2026, 12, 1, 19, 3, 10, 123456, tzinfo=UTC)


def _measure(engine, slug: str = "sweep") -> None:
    """Trials as the runner leaves them: two succeeded with metric rows, one failed, one still running."""
    with session_scope(engine) as s:
        campaign = campaigns.get_campaign(s, slug)
        by_key = {a.key: a for a in campaigns.approaches(s, campaign)}
        specs = [
            (
                "decode-graph",
                "succeeded",
                [("decode_step_ms", 15.947, [15.94, 15.947, 15.96]), ("decode_step_ms", 16.97, [16.9, 16.97, 17.0])],
            ),
            ("draft-graph", "succeeded", [("draft_step_ms", 1.047, [1.044, 1.047, 1.062])]),
            ("draft-graph", "failed", []),
            ("decode-graph", "running", []),  # just started: nothing measured yet
        ]
        assert campaign.id is not None
        for n, (key, state, metrics) in enumerate(specs):
            approach = by_key[key]
            assert approach.id is not None
            trial = Trial(
                campaign_id=campaign.id,
                approach_id=approach.id,
                recipe=approach.recipe or {"kind": "draft_step"},
                state=state,
                phase="done",
                fingerprint=FINGERPRINT,
                exit_code=0 if state == "succeeded" else (1 if state == "failed" else None),
                error="rank 0 exited with code 1" if state == "failed" else "",
                requested_by="operator",
                gpu_released=True,
                created_at=T0 + timedelta(minutes=n),
                started_at=T0 + timedelta(minutes=n, seconds=2),
                finished_at=None if state == "running" else T0 + timedelta(minutes=n, seconds=30),
            )
            s.add(trial)
            s.flush()
            assert trial.id is not None
            for i, (name, value, samples) in enumerate(metrics):
                tags = {"batch": 8 * i or 1, "draft_tokens": 0, "context": 1024, "method": "graph-replay"}
                s.add(
                    Metric(
                        trial_id=trial.id,
                        approach_id=approach.id,
                        campaign_id=campaign.id,
                        seq=3,
                        index=i,
                        name=name,
                        value=value,
                        unit="ms",
                        tags=tags,
                        samples=samples,
                        created_at=T0 + timedelta(minutes=n, seconds=10 + i),
                    )
                )


def _export(engine, slug: str = "sweep", with_results: bool = True) -> str:
    with session_scope(engine, write=False) as s:
        return "".join(export_stream(s, slug, with_results))


def _rows(engine, slug: str) -> list[tuple]:
    """What a campaign's trials and metrics hold, in a form comparable across campaigns."""
    with session_scope(engine, write=False) as s:
        campaign = campaigns.get_campaign(s, slug)
        keys = {a.id: a.key for a in campaigns.approaches(s, campaign)}
        out = []
        for t in s.exec(select(Trial).where(Trial.campaign_id == campaign.id).order_by(col(Trial.id))):
            metrics = s.exec(
                select(Metric).where(Metric.trial_id == t.id).order_by(col(Metric.seq), col(Metric.index))
            ).all()
            out.append(
                (
                    keys[t.approach_id],
                    t.state,
                    t.fingerprint,
                    t.exit_code,
                    t.error,
                    t.created_at.replace(tzinfo=None),
                    t.finished_at.replace(tzinfo=None) if t.finished_at else None,
                    [(m.name, m.value, m.unit, m.tags, m.samples, m.seq, m.index) for m in metrics],
                )
            )
        return out


def _report(engine, slug: str) -> list[tuple]:
    with session_scope(engine, write=False) as s:
        campaign = campaigns.get_campaign(s, slug)
        keys = {a.id: a.key for a in campaigns.approaches(s, campaign)}
        rows = load_campaign_metrics(s, campaign).rows
        return sorted((keys[r.approach_id], r.name, r.value, sorted(r.tags.items())) for r in rows)


def test_results_round_trip_as_measurements(engine):
    with session_scope(engine) as s:
        import_campaign(s, FILE, actor="test")
    _measure(engine)
    text = _export(engine)
    doc = yaml.safe_load(text)
    # The ended trials travel, oldest first; the running one does not.
    assert [(r["approach"], r["state"]) for r in doc["results"]] == [
        ("decode-graph", "succeeded"),
        ("draft-graph", "succeeded"),
        ("draft-graph", "failed"),
    ]
    first = doc["results"][0]
    assert first["fingerprint"] == FINGERPRINT and first["created_at"] == T0.isoformat()
    assert [m["samples"] for m in first["metrics"]] == [[15.94, 15.947, 15.96], [16.9, 16.97, 17.0]]
    assert (
        first["metrics"][1]["tags"]["batch"] == 8
        and first["metrics"][1]["at"] == (T0 + timedelta(seconds=11)).isoformat()
    )
    assert "results:" not in _export(engine, with_results=False)  # the plain export is unchanged

    # Imported as another campaign on this board: the same trials, metrics, samples and stack.
    copy = text.replace("slug: sweep\n", "slug: sweep-copy\n", 1)
    with session_scope(engine) as s:
        summary = import_campaign(s, copy, actor="test").summary
    assert "results: 3 trials with 3 metrics added, 0 already here" in summary
    assert _rows(engine, "sweep-copy") == [row for row in _rows(engine, "sweep") if row[1] != "running"]
    with session_scope(engine, write=False) as s:
        trials = s.exec(select(Trial).where(Trial.campaign_id == campaigns.get_campaign(s, "sweep-copy").id)).all()
        assert {t.phase for t in trials} == {"imported"} and {t.runner_id for t in trials} == {None}
    # The report reads them exactly as it reads the measured ones; the export of the copy is the same file.
    assert _report(engine, "sweep-copy") == _report(engine, "sweep")
    assert _export(engine, "sweep-copy") == copy


def test_importing_the_same_results_twice_adds_them_once(engine):
    with session_scope(engine) as s:
        import_campaign(s, FILE, actor="test")
    _measure(engine)
    text = _export(engine).replace("slug: sweep\n", "slug: again\n", 1)
    for expected in (
        "3 trials with 3 metrics added, 0 already here",
        "0 trials with 0 metrics added, 3 already here",
    ):
        with session_scope(engine) as s:
            assert expected in import_campaign(s, text, actor="test").summary
    with session_scope(engine, write=False) as s:
        again = campaigns.get_campaign(s, "again")
        assert s.exec(select(func.count()).select_from(Trial).where(Trial.campaign_id == again.id)).one() == 3
        assert s.exec(select(func.count()).select_from(Metric).where(Metric.campaign_id == again.id)).one() == 3


RESULT = """\
results:
- approach: decode-graph
  state: succeeded
  created_at: '2026-12-01T19:03:10+00:00'
  metrics:
  - {name: decode_step_ms, value: 15.9, unit: ms, seq: 1, index: 0, samples: [15.8, 15.9, 16.0]}
"""


@pytest.mark.parametrize(
    "change, message",
    [
        (("approach: decode-graph", "approach: nope"), "line 16: results[0].approach: no approach 'nope' in this file"),
        (("state: succeeded", "state: running"), "line 17: results[0].state: Input should be 'succeeded'"),
        (("value: 15.9", "value: .nan"), "line 20: results[0].metrics[0].value: must be a finite number"),
        (
            ("samples: [15.8, 15.9, 16.0]", "samples: [15.8, fast]"),
            "line 20: results[0].metrics[0].samples[1]: Input should be a valid number",
        ),
        (
            ("created_at: '2026-12-01T19:03:10+00:00'", "created_at: soon"),
            "line 18: results[0].created_at: Input should be a valid datetime",
        ),
        (
            ("index: 0, samples", "index: 0}\n  - {name: x, value: 1, seq: 1, index: 0, samples"),
            "results[0]: metrics[1]: a second metric at seq 1, index 0",
        ),
    ],
)
def test_bad_results_are_refused_whole_naming_line_and_field(engine, change, message):
    text = FILE + RESULT.replace(*change)
    with pytest.raises(Invalid) as exc, session_scope(engine) as s:
        import_campaign(s, text, actor="test")
    assert message in exc.value.message, exc.value.message
    with session_scope(engine, write=False) as s:
        assert s.exec(select(func.count()).select_from(Trial)).one() == 0
        assert s.exec(select(func.count()).select_from(Campaign)).one() == 0  # all or nothing


def test_samples_over_the_contract_are_refused(engine):
    samples = ", ".join(["1.0"] * 1001)
    text = FILE + RESULT.replace("samples: [15.8, 15.9, 16.0]", f"samples: [{samples}]")
    with pytest.raises(Invalid) as exc, session_scope(engine) as s:
        import_campaign(s, text, actor="test")
    assert "results[0].metrics[0].samples: List should have at most 1000 items" in exc.value.message


def test_cli_exports_with_results(engine, db_url, tmp_path):
    with session_scope(engine) as s:
        import_campaign(s, FILE, actor="test")
    _measure(engine)
    out = tmp_path / "sweep.yaml"
    env = {**os.environ, "CAMPAIGN_DATABASE_URL": db_url, "CAMPAIGN_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "export", "sweep", "--with-results", "-o", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_text() == _export(engine)
