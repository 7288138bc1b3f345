"""The streamed campaign export (`export_stream`) writes, byte for byte, what dumping the whole file as one
structure writes (the export before it streamed, kept here as the reference), for content chosen to hit
every style libyaml picks; its history fast path writes what the dumper writes for every generated value;
batches read in one snapshot."""

from __future__ import annotations

import itertools
import random
import string
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from sqlalchemy import event
from sqlalchemy import select as sa_select
from sqlmodel import Session, col

from app.db import make_engine, migrate, session_scope, stream_in_session
from app.domain import campaign_files, campaigns
from app.domain.campaign_files import (
    _Dumper,
    _history_text,
    _inline_scalar,
    _Pieces,
    export_stream,
    import_campaign,
)
from app.models import Approach, Campaign, StatusChange

pytestmark = pytest.mark.both_databases  # export round trip, read in one snapshot (REPEATABLE READ on PostgreSQL)

# ---- the reference: the whole document in memory, dumped at once (the export before it streamed) ----------


def reference_export(session: Session, campaign: Campaign) -> str:
    histories: dict[int, list[dict[str, Any]]] = defaultdict(list)
    rows = session.execute(
        sa_select(
            col(StatusChange.approach_id),
            col(StatusChange.at),
            col(StatusChange.to_status),
            col(StatusChange.reason),
            col(StatusChange.actor),
        )
        .join(Approach, col(Approach.id) == col(StatusChange.approach_id))
        .where(col(Approach.campaign_id) == campaign.id)
        .order_by(col(StatusChange.at), col(StatusChange.id))
    )
    for approach_id, at, to, reason, actor in rows:
        at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
        entry: dict[str, Any] = {"at": at.isoformat(), "to": to}
        if reason:
            entry["reason"] = reason
        if actor:
            entry["actor"] = actor
        histories[approach_id].append(entry)
    doc_approaches = []
    for a in campaigns.approaches(session, campaign):
        item: dict[str, Any] = {"key": a.key, "title": a.title, "status": a.status}
        for name in ("reason", "description", "evidence", "effort", "prerequisites"):
            if getattr(a, name):
                item[name] = getattr(a, name)
        for name in ("recipe", "requirements", "bound_to", "verdict_fingerprint"):
            if getattr(a, name) is not None:
                item[name] = getattr(a, name)
        if histories.get(a.id):  # type: ignore[arg-type]
            item["history"] = histories[a.id]  # type: ignore[index]
        doc_approaches.append(item)
    fields = {
        name: getattr(campaign, name)
        for name in campaign_files.CAMPAIGN_FIELDS
        if name not in campaign_files.OPTIONAL_CAMPAIGN_FIELDS
        or getattr(campaign, name) != campaign_files.OPTIONAL_CAMPAIGN_FIELDS[name]
    }
    doc = {"format": campaign_files.FORMAT, "campaign": fields, "approaches": doc_approaches}
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)


# ---- values that hit every scalar style ---------------------------------------------------------------------

LONG = "the draft model's allreduce at 8 GPUs measured " * 6  # several lines past the width: folded
TRICKY = [
    "plain words",
    "yes",
    "No",
    "on",
    "OFF",
    "true",
    "False",
    "null",
    "Null",
    "~",
    "12",
    "-3",
    "0x1F",
    "0o17",
    "1_000",
    "1.5",
    "1e3",
    "6.02e+23",
    ".inf",
    "-.Inf",
    ".nan",
    "2025-03-01",
    "2025-03-01 10:00:00",
    "2025-03-01T10:00:00+00:00",
    "12:30",
    "1:20:30",
    "=",
    "<<",
    "a: b",
    "a:b",
    "ends with:",
    ": starts",
    "? q",
    "- dash",
    "-dash",
    "-",
    "---",
    "--- doc",
    "...",
    "# comment",
    "a # b",
    "a#b",
    "trial #12 started",
    "trial #12 failed: NCCL error: unhandled system error",
    "it's",
    "'quoted'",
    '"double"',
    'say "hi"',
    "back\\slash",
    "@at",
    "`tick",
    "%pct",
    "&anchor",
    "*alias",
    "!tag",
    "|pipe",
    ">fold",
    "{a: 1}",
    "[1, 2]",
    "a, b",
    " leading",
    "trailing ",
    "  both  ",
    "two  spaces",
    "tab\there",
    "line\nbreak",
    "ends with newline\n",
    "two newlines\n\n",
    "\nstarts with newline",
    "trailing space \nthen more",
    "line \n next",
    "crlf\r\nline",
    "ünïcödé",
    "速度 → 38 tok/s",
    "emoji 🚀",
    "nbsp\u00a0here",
    "nel\u0085here",
    "ls\u2028here",
    "bom\ufeffhere",
    "bell\x07",
    "esc\x1b[31m",
    "del\x7f",
    LONG.strip(),
    "x" * 120,
    "word " * 30 + "end",
    'KeyError: 12\n  File "x.py", line 3\n    raise\n',
]


def _tricky_campaign(session: Session) -> Campaign:
    campaign = Campaign(
        slug="tricky",
        name="Trïcky: a campaign # of strings",
        description="multi-line\ndescription: with colons\n",
        baseline_tok_s=82.5,
        accept_length=2.4,
        input_sources={"baseline_tok_s": "trial #7 (2025-03-01)", "accept_length": "yes"},
        reported=[{"approach": "a-0", "t_ar_us": 12.5, "source": "paper: table 3\nsecond line"}],
    )
    session.add(campaign)
    session.flush()
    assert campaign.id is not None
    t0 = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)
    for i in range(len(TRICKY) + 3):
        value = TRICKY[i % len(TRICKY)]
        approach = Approach(
            campaign_id=campaign.id,
            key=f"a-{i}",
            title=value[:200] or "t",
            position=i // 2 + 1,  # pairs share a position: the order falls back on the id
            status=["untested", "dead_end", "deferred", "promising", "adopted"][i % 5],
            reason=TRICKY[(i + 1) % len(TRICKY)] if i % 3 else "",
            description=TRICKY[(i + 2) % len(TRICKY)] if i % 4 else "",
            evidence=LONG + "\n" + TRICKY[(i + 3) % len(TRICKY)] if i % 2 else "",
            effort=TRICKY[(i + 4) % len(TRICKY)][:200] if i % 5 else "",
            prerequisites=TRICKY[(i + 5) % len(TRICKY)] if i % 6 else "",
            recipe={"kind": "command", "params": {"argv": ["echo", value, "yes", "1.5"]}, "timeout_s": 60}
            if i % 2
            else None,
            requirements={"gpus": 8, "min_sm": "9.0", "software": ["torch", value]} if i % 3 == 1 else None,
            bound_to={"components": ["torch"]} if i % 4 == 1 else None,
            verdict_fingerprint={"torch": "2.10.0", "cuda": "12.8", "hostname": value} if i % 4 == 1 else None,
        )
        session.add(approach)
        session.flush()
        assert approach.id is not None
        if i % 7 == 3:
            continue  # no history
        for k in range(len(TRICKY) if i < 3 else 4):
            session.add(
                StatusChange(
                    approach_id=approach.id,
                    from_status="",
                    to_status=["untested", "queued", "running", "yes", "null", "12"][(i + k) % 6],
                    reason=TRICKY[(i * 7 + k) % len(TRICKY)] if (i + k) % 5 else "",
                    actor=TRICKY[(i + k * 3) % len(TRICKY)][:120] if (i + k) % 4 else "",
                    at=t0 + timedelta(hours=k, microseconds=(i * k) % 2 * 250),  # with and without microseconds
                )
            )
    session.flush()
    return campaign


def _streamed(session: Session, slug: str) -> str:
    return "".join(export_stream(session, slug))


@pytest.mark.parametrize("batch", [3, campaign_files.EXPORT_BATCH])
def test_stream_is_the_whole_document_dump_byte_for_byte(engine, monkeypatch, batch):
    monkeypatch.setattr(campaign_files, "EXPORT_BATCH", batch)
    with session_scope(engine) as s:
        _tricky_campaign(s)
    with session_scope(engine, write=False) as s:
        expected = reference_export(s, campaigns.get_campaign(s, "tricky"))
        pieces = list(export_stream(s, "tricky"))
    assert "".join(pieces) == expected
    approaches = len(yaml.safe_load(expected)["approaches"])
    ends_open = expected.endswith("\n...\n")  # the last literal block is |+: the document says where it ends
    assert len(pieces) == 1 + -(-approaches // batch) + ends_open  # the header, then one piece per batch
    # The content reached every style: literal blocks, single and double quotes, folded long lines.
    for mark in (": |", ": |-", ": |+", " '", ' "', "'yes'", "'2025-03-01T10:00:00+00:00'"):
        assert mark in expected, mark


def test_long_histories_stream_in_pieces_with_two_queries_per_batch(engine, monkeypatch):
    """No piece holds more than PIECE_ENTRIES history entries (a long history is never held whole), and the
    statements are one for the campaign, then two per batch of approaches (and one that finds no more),
    whatever the number of approaches and history entries."""
    monkeypatch.setattr(campaign_files, "EXPORT_BATCH", 4)
    monkeypatch.setattr(campaign_files, "PIECE_ENTRIES", 10)
    with session_scope(engine) as s:
        _tricky_campaign(s)
    statements: list[str] = []

    def count(conn, cursor, statement, *args) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        with session_scope(engine, write=False) as s:
            pieces = list(export_stream(s, "tricky"))
    finally:
        event.remove(engine, "before_cursor_execute", count)
    with session_scope(engine, write=False) as s:
        expected = reference_export(s, campaigns.get_campaign(s, "tricky"))
    assert "".join(pieces) == expected
    assert max(piece.count("\n  - at: ") for piece in pieces) <= 10
    assert max(len(a.get("history", [])) for a in yaml.safe_load(expected)["approaches"]) > 50
    batches = -(-len(yaml.safe_load(expected)["approaches"]) // 4)
    assert len([q for q in statements if q.lstrip().upper().startswith("SELECT")]) == 1 + 2 * batches + 1


def test_a_campaign_without_approaches(engine):
    with session_scope(engine) as s:
        s.add(Campaign(slug="empty", name="Empty"))
    with session_scope(engine, write=False) as s:
        expected = reference_export(s, campaigns.get_campaign(s, "empty"))
        assert _streamed(s, "empty") == expected
    assert expected.endswith("approaches: []\n")


def _import_into(tmp_path, name: str, text: str) -> str:
    """Import `text` into a new SQLite database; its export."""
    url = f"sqlite:///{tmp_path / name}"
    migrate(url)
    other = make_engine(url)
    try:
        with session_scope(other) as s:
            import_campaign(s, text, actor="test")
        with session_scope(other, write=False) as s:
            return _streamed(s, "tricky")
    finally:
        other.dispose()


def test_round_trip_of_the_tricky_campaign(engine, tmp_path):
    """Export, import, export, import elsewhere, export: the same text, the tricky histories included."""
    with session_scope(engine) as s:
        _tricky_campaign(s)
    with session_scope(engine, write=False) as s:
        doc = yaml.safe_load(_streamed(s, "tricky"))
    # Keep what the importer accepts as it is (it strips titles, checks statuses, recipes, requirements).
    for a in doc["approaches"]:
        a["title"] = a["title"].strip() or "t"
        for name in ("description", "effort", "prerequisites", "evidence", "requirements", "recipe"):
            a.pop(name, None)
        for entry in a.get("history", []):
            entry["to"] = entry["to"] if entry["to"] in ("untested", "queued", "running") else "untested"
        if a["status"] in ("dead_end", "deferred") and not a.get("reason", "").strip():
            a["reason"] = "needs one"
    doc["campaign"].update(reported=None, name="Tricky", description="")
    first = _import_into(tmp_path, "first.db", yaml.safe_dump(doc, allow_unicode=True, sort_keys=False))
    again = _import_into(tmp_path, "again.db", first)
    assert again == first
    reasons = {e.get("reason") for a in yaml.safe_load(first)["approaches"] for e in a.get("history", [])}
    assert {"trial #12 started", "two newlines\n\n", " leading", "yes", "ünïcödé"} <= reasons


def test_the_stream_reads_one_snapshot(engine, monkeypatch):
    """Changes committed while the stream is between batches do not show in it: no approach twice or missing
    when one moves, no history half old and half new."""
    monkeypatch.setattr(campaign_files, "EXPORT_BATCH", 2)
    with session_scope(engine) as s:
        campaign = campaigns.create_campaign(s, campaign_files.CampaignCreate(slug="snap", name="Snap"))
        for i in range(6):
            campaigns.add_approach(s, campaign, campaign_files.ApproachCreate(key=f"a{i}", title=f"A{i}"), "test")
    with session_scope(engine, write=False) as s:
        before = _streamed(s, "snap")
    pieces = stream_in_session(engine, export_stream, "snap")
    got = [next(pieces), next(pieces)]  # the header, then the first batch: the snapshot is taken
    with session_scope(engine) as s:
        campaign = campaigns.get_campaign(s, "snap")
        last = campaigns.get_approach(s, campaign, "a5")
        campaigns.move_approach(s, campaign, last, 1)
        a3 = campaigns.get_approach(s, campaign, "a3")
        campaigns.change_status(s, a3, campaign_files.ApproachStatus.deferred, "later", "test")
        a3.title = "changed"
    got += list(pieces)
    assert "".join(got) == before
    with session_scope(engine, write=False) as s:
        after = _streamed(s, "snap")
    assert after != before and "- key: a5" in after.split("- key: a0")[0]


@pytest.mark.parametrize("length", [1, 2, 3, 4])
def test_pieces_end_the_document_as_the_whole_dump_does(length):
    """Every order of approaches whose last literal block keeps its line breaks (|+), strips them (|-),
    has line breaks but no literal block (double-quoted), or none: the pieces, joined and ended, are the
    whole document's dump ("..." after the text exactly when the whole document's last literal block is |+)."""
    kinds = [
        {"key": "keep", "evidence": "kept\n\n"},
        {"key": "strip", "evidence": "one\ntwo"},
        {"key": "quoted", "evidence": "trailing space \nnext"},
        {"key": "plain", "evidence": "no break"},
    ]
    for combo in itertools.product(kinds, repeat=length):
        items = [dict(item, title=str(i)) for i, item in enumerate(combo)]
        whole = yaml.dump({"approaches": items}, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
        pieces = _Pieces()
        assert "approaches:\n" + "".join(pieces.dump([item]) for item in items) + pieces.end() == whole, combo


# ---- the history fast path against the dumper, value by value ---------------------------------------------

ALPHABET = string.ascii_letters + string.digits + " " * 12 + string.punctuation + "é→\t\n"


def _generated(rng: random.Random, count: int) -> list[str]:
    """Random printable text and tricky pieces, short and around the width, joined at random."""
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            if rng.random() < 0.4:
                parts.append(rng.choice(TRICKY))
            else:
                parts.append("".join(rng.choice(ALPHABET) for _ in range(rng.choice([1, 3, 8, 20, 60, 85, 95]))))
        out.append(rng.choice(["", " ", ": ", " #", "'"]).join(parts))
    return out


@pytest.mark.parametrize("column", [8, 11, 12])
def test_inline_scalar_is_what_the_dumper_writes(column):
    rng = random.Random(column)
    values = TRICKY + _generated(rng, 4000)
    values += ["w" * n for n in range(80, 100)] + [("ab " * 40)[:n] for n in range(80, 100)]
    inlined = 0
    for value in values:
        text = _inline_scalar(value, column)
        if text is None:
            continue
        inlined += 1
        key = "k" * (column - 2)  # "kkk: " puts the value at `column`
        dumped = yaml.dump({key: value}, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
        assert dumped == f"{key}: {text}\n", value
    assert inlined > len(values) // 3  # the fast path is taken, not just refused


def test_the_timestamp_shortcut_is_the_general_path():
    """`_history_text` single-quotes what `_history_entry` makes of a datetime without asking `_inline_scalar`:
    the same text, for any date and time, with and without microseconds."""
    rng = random.Random(3)
    for _ in range(3000):
        moment = datetime(1, 1, 1, tzinfo=UTC) + timedelta(seconds=rng.randrange(315_537_897_599))
        moment = moment.replace(microsecond=rng.choice([0, rng.randrange(1_000_000)]))
        iso = campaign_files._history_entry(moment.replace(tzinfo=None), "untested", "", "")["at"]
        assert iso == moment.isoformat() and campaign_files._UTC_ISO.fullmatch(iso)
        assert _inline_scalar(iso, 8) == f"'{iso}'"
    assert not campaign_files._UTC_ISO.fullmatch("٢٠٢٥-03-01T10:00:00+00:00")  # other digits read back as a string


def test_history_entries_are_what_the_dumper_writes():
    rng = random.Random(12)
    values = TRICKY + _generated(rng, 3000)
    t0 = datetime(2025, 3, 1, tzinfo=UTC)
    ats = [(t0 + timedelta(seconds=n * 7919, microseconds=n % 3 * 1001)).isoformat() for n in range(40)]
    entries = []
    for n in range(len(values)):
        entry: dict[str, Any] = {
            "at": rng.choice(ats + values[:50]),
            "to": rng.choice(["untested", "queued", "dead_end", "yes", "null", "12", rng.choice(values)]),
        }
        if rng.random() < 0.8:
            entry["reason"] = values[n]
        if rng.random() < 0.7:
            entry["actor"] = rng.choice(["bench", "Ada Lovelace", "node-a", "yes", rng.choice(values)])
        entries.append(entry)
    head = "approaches:\n- key: k\n  history:\n"
    for start in range(0, len(entries), 250):
        chunk = entries[start : start + 250]
        dumped = yaml.dump(
            {"approaches": [{"key": "k", "history": chunk}]},
            Dumper=_Dumper,
            sort_keys=False,
            allow_unicode=True,
            width=100,
        )
        pieces = _Pieces()
        if dumped != head + "".join(_history_text(e, pieces) for e in chunk) + pieces.end():
            for entry in chunk:  # name the first entry that differs
                alone = yaml.dump(
                    {"approaches": [{"key": "k", "history": [entry]}]},
                    Dumper=_Dumper,
                    sort_keys=False,
                    allow_unicode=True,
                    width=100,
                )
                pieces = _Pieces()
                assert alone == head + _history_text(entry, pieces) + pieces.end(), entry
            pytest.fail("the chunk differs but no entry alone does")
