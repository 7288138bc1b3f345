"""The on-disk log spool: order, acks, compaction, surviving a runner restart."""

from __future__ import annotations

import json

import pytest

from runners.spool import Spool, SpoolBusy


def _texts(chunks):
    return [(c.seq, c.offset, c.data) for c in chunks]


def test_chunks_get_seqs_in_order_and_are_read_back_exactly(tmp_path):
    spool = Spool(tmp_path)
    attempt = spool.open(7, "att-1")
    assert attempt.last_seq == -1 and not attempt.has_unacked
    assert [
        attempt.append(0, "héllo\n"),
        attempt.append(7, 'quote " and \\ and \n\n'),
        attempt.append(30, "\u2028x"),
    ] == [0, 1, 2]
    assert _texts(attempt.chunks_after(-1)) == [
        (0, 0, "héllo\n"),
        (1, 7, 'quote " and \\ and \n\n'),
        (2, 30, "\u2028x"),
    ]
    assert _texts(attempt.chunks_after(0, limit=1)) == [(1, 7, 'quote " and \\ and \n\n')]
    assert attempt.chunks_after(2) == []


def test_acked_chunks_are_not_resent_and_everything_acked_compacts(tmp_path):
    spool = Spool(tmp_path)
    attempt = spool.open(7, "att-1")
    for i in range(5):
        attempt.append(i * 2, f"{i}\n")
    attempt.ack(2)
    assert [c.seq for c in attempt.chunks_after(-1)] == [3, 4]
    attempt.ack(1)  # an old ack changes nothing
    assert [c.seq for c in attempt.chunks_after(-1)] == [3, 4]
    attempt.ack(4)
    assert attempt.chunks_after(-1) == [] and not attempt.has_unacked
    assert (attempt.directory / "chunks.jsonl").stat().st_size == 0
    assert attempt.append(10, "5\n") == 5  # seqs continue after compaction
    assert _texts(attempt.chunks_after(-1)) == [(5, 10, "5\n")]


def test_spool_survives_a_restart_and_resends_only_unacked(tmp_path):
    spool = Spool(tmp_path)
    attempt = spool.open(7, "att-1")
    for i in range(6):
        attempt.append(i, f"{i}")
    attempt.ack(3)
    attempt.set_leader(1234, 99.5)
    spool.open(8, "done-attempt").set_finished({"type": "finished", "trial_id": 8, "attempt_id": "done-attempt"})
    spool.close()

    again = Spool(tmp_path)
    found = {a.attempt_id: a for a in again.attempts()}
    assert set(found) == {"att-1", "done-attempt"}
    reopened = found["att-1"]
    assert reopened.trial_id == 7 and reopened.acked_seq == 3 and reopened.last_seq == 5
    assert reopened.leader == {"pid": 1234, "create_time": 99.5}
    assert _texts(reopened.chunks_after(-1)) == [(4, 4, "4"), (5, 5, "5")]
    done = found["done-attempt"]
    assert done.finished is not None and done.finished["trial_id"] == 8 and done.has_unacked


def test_a_torn_last_line_is_cut_off_on_reopen(tmp_path):
    spool = Spool(tmp_path)
    attempt = spool.open(1, "att")
    attempt.append(0, "a\n")
    attempt.append(2, "b\n")
    spool.close()
    path = tmp_path / "att" / "chunks.jsonl"
    with open(path, "ab") as handle:
        handle.write(b'{"seq": 2, "offset": 4, "da')
    again = Spool(tmp_path).open(1, "att")
    assert again.last_seq == 1
    assert again.append(4, "c\n") == 2
    assert [json.loads(line)["data"] for line in path.read_text().splitlines()] == ["a\n", "b\n", "c\n"]


def test_remove_deletes_the_attempt(tmp_path):
    spool = Spool(tmp_path)
    attempt = spool.open(1, "att")
    attempt.append(0, "x")
    attempt.remove()
    assert not (tmp_path / "att").exists()
    assert spool.attempts() == []
    assert spool.open(1, "att").last_seq == -1  # a new spool, not the removed one


def test_odd_attempt_ids_get_safe_directory_names(tmp_path):
    spool = Spool(tmp_path)
    attempt = spool.open(1, "../../etc/passwd")
    assert attempt.directory.parent == tmp_path
    spool.close()
    assert [a.attempt_id for a in Spool(tmp_path).attempts()] == ["../../etc/passwd"]


def test_two_runners_cannot_share_a_spool_directory(tmp_path):
    first = Spool(tmp_path)
    with pytest.raises(SpoolBusy, match="in use by another runner"):
        Spool(tmp_path)
    first.close()
    Spool(tmp_path).close()
