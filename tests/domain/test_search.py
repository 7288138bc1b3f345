"""Issue 45 item 3 on SQLite and PostgreSQL: the databases' own full-text search over approaches, trials
(parameters, log text) and verdicts; ranked, the words marked, each hit linking to its field or log line;
logs searchable once indexed, and a trimmed chunk leaving the index."""

from __future__ import annotations

import pytest
from sqlalchemy import delete, text
from sqlmodel import col, select

from app.db import session_scope
from app.domain import search
from app.domain.errors import Invalid
from app.models import Approach, Campaign, LogChunk, StatusChange, Trial

pytestmark = pytest.mark.both_databases  # full-text search: FTS5 on SQLite, tsvector + GIN on PostgreSQL


def _seed(engine) -> dict[str, int]:
    with session_scope(engine) as s:
        c = Campaign(slug="kimi", name="Kimi")
        s.add(c)
        s.flush()
        a = Approach(
            campaign_id=c.id,  # type: ignore[arg-type]
            key="symm",
            title="Symmetric memory allreduce",
            evidence="Measured twice: the one-shot kernel halves the latency at 8 tokens.",
            prerequisites="torch 2.10 with NVSHMEM",
        )
        b = Approach(campaign_id=c.id, key="pcie", title="PCIe IPC allreduce")  # type: ignore[arg-type]
        s.add_all([a, b])
        s.flush()
        assert c.id is not None and b.id is not None
        t = Trial(
            campaign_id=c.id, approach_id=b.id, recipe={"kind": "command", "params": {"argv": ["bench", "--tp", "8"]}}
        )
        s.add(t)
        s.flush()
        s.add(StatusChange(approach_id=b.id, from_status="untested", to_status="dead_end", reason="NCCL hangs on PCIe"))
        chunks = [
            LogChunk(trial_id=t.id, attempt_id="a1", seq=0, offset=0, data="starting\nloading weights\n"),  # type: ignore[arg-type]
            LogChunk(trial_id=t.id, attempt_id="a1", seq=1, offset=25, data="step 3\n<b>KeyError: 12</b>\ndone\n"),  # type: ignore[arg-type]
        ]
        s.add_all(chunks)
        s.flush()
        return {"trial": t.id or 0, "chunk": chunks[1].id or 0}


def _index(engine) -> None:
    with session_scope(engine) as s:
        while search.index_logs(s):
            pass


def test_search_finds_each_kind_marked_and_linked(engine):
    ids = _seed(engine)
    with session_scope(engine, write=False) as s:
        if s.get_bind().dialect.name == "sqlite":
            assert search.search(s, "KeyError 12") == []  # stored, not yet indexed
            assert search.log_backlog(s) == 2
    _index(engine)
    with session_scope(engine, write=False) as s:
        (log,) = [h for h in search.search(s, "KeyError: 12") if h.kind == "log"]
        assert log.link == f"/trials/{ids['trial']}/log/1#L2" and log.campaign_slug == "kimi"
        assert f"{search.MARK_START}KeyError{search.MARK_END}" in log.snippet
        (evidence,) = search.search(s, "one-shot latency")
        assert evidence.kind == "approach" and evidence.field == "evidence"
        assert evidence.link == "/campaigns/kimi/approaches/symm#field-evidence"
        (verdict,) = [h for h in search.search(s, "NCCL hangs") if h.kind == "verdict"]
        assert verdict.link.startswith("/campaigns/kimi/approaches/pcie#change-")
        assert [h.kind for h in search.search(s, "nvshmem")] == ["approach"]  # any letter case
        params = [h for h in search.search(s, "bench") if h.kind == "trial"]
        assert params and params[0].field == "parameters" and params[0].link == f"/trials/{ids['trial']}"
        by_id = search.search(s, f"#{ids['trial']}")
        assert by_id[0].link == f"/trials/{ids['trial']}"
        # ranked: the approach that says "allreduce" in its title twice over beats none; both found
        assert {h.title for h in search.search(s, "allreduce")} >= {"Symmetric memory allreduce", "PCIe IPC allreduce"}
        for bad in ("", "   ", "?!", "x" * 300):
            with pytest.raises(Invalid):
                search.search(s, bad)
        assert isinstance(search.search(s, 'NEAR(a b) OR "x'), list)  # FTS syntax is never interpreted: no error


def test_a_trimmed_chunk_leaves_the_index(engine):
    ids = _seed(engine)
    _index(engine)
    with session_scope(engine) as s:
        s.execute(delete(LogChunk).where(LogChunk.id == ids["chunk"]))  # type: ignore[arg-type]
    with session_scope(engine, write=False) as s:
        assert [h for h in search.search(s, "KeyError") if h.kind == "log"] == []
        assert [h.kind for h in search.search(s, "weights")] == ["log"]
        if s.get_bind().dialect.name == "sqlite":  # the index holds exactly the chunks that remain
            n = s.execute(
                search.text("SELECT count(*) FROM search_log WHERE search_log MATCH '\"KeyError\"'")
            ).scalar_one()
            assert n == 0
    with session_scope(engine) as s:  # an approach edited: its old words leave, its new ones come
        a = s.exec(select(Approach).where(Approach.key == "symm")).one()
        a.evidence = "Replaced by the multimem kernel."
        s.add(a)
    with session_scope(engine, write=False) as s:
        assert search.search(s, "halves") == [] and search.search(s, "multimem")[0].field == "evidence"


def test_a_pass_limited_by_bytes_says_it_is_behind(engine):
    """The log pipeline stores 64 KiB chunks: a pass stops at INDEX_BYTES after a few of them, far below
    INDEX_BATCH chunks; it says more are waiting, and the indexer then follows its duty cycle, not the idle
    poll (it used to wait the 1 s poll after every four chunks of a flood: 256 KiB/s)."""
    from app.services import search as indexer

    ids = _seed(engine)
    big = "x" * 60_000 + "\n"
    with session_scope(engine) as s:
        s.add_all(
            LogChunk(trial_id=ids["trial"], attempt_id="a2", seq=n, offset=0, data=f"{n} {big}") for n in range(10)
        )
    with session_scope(engine) as s:
        if s.get_bind().dialect.name != "sqlite":
            assert search.index_pass(s) == (0, False)  # PostgreSQL indexes on insert
            return
        count, more = search.index_pass(s)
        assert 0 < count < 10 and more
    _index(engine)
    with session_scope(engine) as s:
        assert search.index_pass(s) == (0, False) and search.log_backlog(s) == 0
    assert indexer.next_pause(0.01, True) < indexer.POLL_S
    assert indexer.next_pause(0.01, True) == pytest.approx(0.09)
    assert indexer.next_pause(0.01, False) == indexer.POLL_S


def _integrity(s) -> None:
    # FTS5 compares its index with log_chunk: a chunk indexed twice, or deleted from the index unindexed, fails.
    s.execute(text("INSERT INTO search_log (search_log, rank) VALUES ('integrity-check', 1)"))


def test_fresh_logs_are_searchable_after_one_pass_whatever_the_backlog(engine):
    """Issue 45: behind a flood, a pass takes the chunks stored since the last one first (newest first), then
    the backlog oldest first with what its limits leave; the indexer used to take chunks in order, so logs
    stored after a flood waited behind all of it. Every chunk ends up indexed exactly once, none skipped, and a
    trimmed chunk leaves the index only if it was in it."""
    ids = _seed(engine)
    filler = "filler text of a flood\n" * 2600  # ~60 KB: four fill a pass (INDEX_BYTES)

    def flood(first: int, n: int) -> None:
        with session_scope(engine) as s:
            s.add_all(
                LogChunk(trial_id=ids["trial"], attempt_id="f", seq=k, offset=0, data=f"deluge w{k}\n{filler}")
                for k in range(first, first + n)
            )

    def one_pass() -> bool:
        with session_scope(engine) as s:
            return search.index_pass(s)[1]

    flood(0, 12)
    one_pass()  # the flood's newest four
    with session_scope(engine) as s:
        s.add(LogChunk(trial_id=ids["trial"], attempt_id="n", seq=0, offset=0, data="later: zebra KeyError 99\n"))
    assert one_pass() is (engine.dialect.name == "sqlite")  # behind (SQLite): the backlog is still waiting
    with session_scope(engine, write=False) as s:
        assert [h.link for h in search.search(s, "zebra")] == [f"/trials/{ids['trial']}/log/0#L1"]
    flood(12, 6)  # more of the flood, then fresh text again: a second gap below the newest
    with session_scope(engine) as s:
        s.add(LogChunk(trial_id=ids["trial"], attempt_id="n", seq=1, offset=0, data="later: okapi\n"))
    one_pass()
    with session_scope(engine, write=False) as s:
        assert len(search.search(s, "okapi")) == 1
        if engine.dialect.name == "sqlite":
            assert 0 < search.log_backlog(s) < 18
    with session_scope(engine) as s:  # trimmed: w3 still waiting in a gap (never indexed), w11 indexed
        s.execute(delete(LogChunk).where(col(LogChunk.attempt_id) == "f", col(LogChunk.seq).in_([3, 11])))
    for _ in range(20):
        if not one_pass():
            break
    with session_scope(engine, write=False) as s:
        assert search.log_backlog(s) == 0
        links = [h.link for h in search.search(s, "deluge")]
        assert len(links) == len(set(links)) == 16  # every chunk of the flood once, the two trimmed gone
        assert {search.search(s, f"w{k}")[0].link for k in (0, 5, 12, 17)} == {
            f"/trials/{ids['trial']}/log/{k}#L1" for k in (0, 5, 12, 17)
        }
        assert search.search(s, "w3") == search.search(s, "w11") == []
        if engine.dialect.name == "sqlite":
            _integrity(s)
            assert s.execute(text("SELECT count(*) FROM search_log_gap")).scalar_one() == 0
