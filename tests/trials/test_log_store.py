"""app.domain.logs on a real database (SQLite file and PostgreSQL): idempotent append, order, the
cap with its marker, metrics from lines split across chunks."""

from __future__ import annotations

import numpy as np
import pytest
from sqlmodel import Session, col, select

from app.db import make_engine, migrate, session_scope
from app.domain import logs
from app.domain.scheduling import create_trial
from app.models import Approach, Campaign, Metric, Runner, Trial
from app.protocol.metrics import format_metric

pytestmark = pytest.mark.both_databases  # bulk ingest of log chunks and metrics, their unique constraints


def _trial(session: Session, trial_id: int) -> Trial:
    trial = session.get(Trial, trial_id)
    assert trial is not None
    return trial


def _setup(db_url):
    migrate(db_url)
    engine = make_engine(db_url)
    with session_scope(engine) as session:
        campaign = Campaign(slug="c", name="C")
        session.add(campaign)
        session.flush()
        assert campaign.id is not None
        approach = Approach(campaign_id=campaign.id, key="a", title="A", position=1, recipe={"kind": "command"})
        runner = Runner(name="r", token_hash="x", connected=True)
        session.add_all([approach, runner])
        session.flush()
        trial = create_trial(session, approach, runner, "test")
        return engine, trial.id, trial.attempt_id, runner.id


def _append(engine, tid, att, rid, items, cap=10**9, metrics=None):
    with session_scope(engine) as session:
        chunks = [logs.Chunk(tid, att, seq, off, data) for seq, off, data in items]
        return logs.append_chunks(session, chunks, runner_id=rid, cap_bytes=cap, metrics=metrics)


def test_duplicates_and_reordering_change_nothing(db_url):
    engine, tid, att, rid = _setup(db_url)
    _append(engine, tid, att, rid, [(2, 4, "c\n"), (0, 0, "a\n")])
    r = _append(engine, tid, att, rid, [(1, 2, "b\n"), (2, 4, "c\n"), (1, 2, "b\n")])
    assert [c.seq for c in r.stored] == [1] and len(r.acked) == 3
    with session_scope(engine, write=False) as session:
        trial = _trial(session, tid)
        assert logs.full_text(session, trial) == "a\nb\nc\n"
        assert logs.read_after(session, trial, 0) == [(1, "b\n", False), (2, "c\n", False)]
        assert logs.last_contiguous_seq(session, tid, att) == 2
        assert trial.log_bytes == 6


def test_cap_keeps_head_and_tail_with_a_marker(db_url):
    engine, tid, att, rid = _setup(db_url)
    lines = [f"{i:03d}\n" for i in range(100)]  # 4 bytes each; cap 80: head 40 bytes, tail 40
    for seq, line in enumerate(lines):
        _append(engine, tid, att, rid, [(seq, seq * 4, line)], cap=80)
    _append(engine, tid, att, rid, [(30, 120, lines[30])], cap=80)  # a resend of a dropped chunk
    with session_scope(engine, write=False) as session:
        trial = _trial(session, tid)
        text = logs.full_text(session, trial)
        head, marker_and_tail = text.split("\n[…", 1)
        assert head == "".join(lines[:10])
        assert marker_and_tail.endswith("".join(lines[-10:]))
        assert f"{trial.log_dropped_bytes:,} bytes dropped" in marker_and_tail
        assert trial.log_bytes == 400 and trial.log_dropped_bytes == 320
        assert logs.last_contiguous_seq(session, tid, att) == 99


def test_metric_lines_split_across_chunks_are_stored_once(db_url):
    engine, tid, att, rid = _setup(db_url)
    line = format_metric("tok_s", 81.9, "tok/s") + "\n"
    last = format_metric("busbw", 12.5, "GB/s")  # no final newline
    parts = ["x\n" + line[:7], line[7:20], line[20:] + "y\n", last]
    extractor = logs.MetricExtractor()
    offsets = [0, 9, 22, 22 + len(parts[2])]
    _append(engine, tid, att, rid, [(2, offsets[2], parts[2]), (0, 0, parts[0])], metrics=extractor)
    _append(engine, tid, att, rid, [(1, offsets[1], parts[1]), (3, offsets[3], parts[3])], metrics=extractor)
    with session_scope(engine) as session:
        extractor.finish(session, _trial(session, tid), last_seq=3)
        logs.MetricExtractor().finish(session, _trial(session, tid), last_seq=3)  # a rescan adds nothing
    with session_scope(engine, write=False) as session:
        rows = session.exec(select(Metric).where(Metric.trial_id == tid).order_by(col(Metric.seq))).all()
        assert [(m.name, m.value, m.unit, m.seq) for m in rows] == [
            ("tok_s", 81.9, "tok/s", 2),
            ("busbw", 12.5, "GB/s", 3),
        ]


def test_a_metric_lines_samples_are_stored_with_it_and_bad_samples_are_left_out(db_url):
    engine, tid, att, rid = _setup(db_url)
    good = format_metric("allreduce_latency_us", 6.5, "us", samples=[6.4, 6.5, 6.7], tokens=4) + "\n"
    too_many = format_metric("allreduce_latency_us", 7.0, "us", tokens=8).replace(
        '"tags"', '"samples": ' + str([1.0] * 1001) + ', "tags"'
    )
    not_numbers = format_metric("allreduce_latency_us", 8.0, "us", tokens=16).replace(
        '"tags"', '"samples": [1, "x"], "tags"'
    )
    text = good + too_many + "\n" + not_numbers + "\n"
    extractor = logs.MetricExtractor()
    _append(engine, tid, att, rid, [(0, 0, text)], metrics=extractor)
    with session_scope(engine) as session:
        extractor.finish(session, _trial(session, tid), last_seq=0)
    with session_scope(engine, write=False) as session:
        rows = session.exec(select(Metric).where(Metric.trial_id == tid).order_by(col(Metric.index))).all()
        assert [(m.value, m.samples) for m in rows] == [(6.5, [6.4, 6.5, 6.7]), (7.0, None), (8.0, None)]
        # Their summary is written with them (what comparisons read: statistics.summary_columns).
        assert (rows[0].samples_median, rows[0].samples_n) == (6.5, 3)
        assert rows[0].samples_cv == pytest.approx(np.std([6.4, 6.5, 6.7], ddof=1) / np.mean([6.4, 6.5, 6.7]))
        assert [(m.samples_median, m.samples_cv, m.samples_n) for m in rows[1:]] == [(None, None, None)] * 2


def test_format_metric_refuses_more_samples_than_a_line_may_carry():
    with pytest.raises(ValueError, match="at most 1000 samples"):
        format_metric("x", 1.0, samples=[1.0] * 1001)
