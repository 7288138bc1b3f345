"""Trial logs: idempotent append on (trial, attempt, seq), reads after a seq, the per-trial cap,
and metric lines read out of the stream.

- Append: a chunk already stored (same trial, attempt, seq) is a duplicate and changes nothing;
  chunks may arrive out of order and are stored as they come; reads order by seq.
- Cap: past `cap_bytes` stored, the head (chunks starting in the first half of the cap) is kept
  and the oldest tail chunks are deleted as new ones arrive. A *tombstone* row (offset -1) sits at
  the highest dropped seq: reads show a marker there, and a resent chunk it covers is not stored again.
  Trial.log_bytes counts every byte accepted, Trial.log_dropped_bytes those dropped.
- Metrics: one line = one metric (app.protocol.metrics). A line may be split across chunks, so
  lines are cut from the contiguous stream; a metric is keyed by (trial, seq of the chunk holding
  the line's end, its index among the metric lines ending there), which makes the live extraction
  and the rescan at the end of a trial agree, so each metric is stored once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from sqlalchemy import delete, insert, update
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from app.domain import statistics
from app.domain.trials import StaleAttempt, current_trial
from app.models import Attempt, LogChunk, Metric, Trial, utcnow
from app.protocol.metrics import METRIC_PREFIX, parse_metric_line

TOMBSTONE_OFFSET = -1
CARRY_LIMIT = 64 * 1024  # a "line" longer than this is not a metric line; keep its end only
PENDING_LIMIT = 512  # out-of-order chunks held for line cutting before giving up (rescan at the end)
READ_PAGE = 500


@dataclass(frozen=True)
class Chunk:
    trial_id: int
    attempt_id: str
    seq: int
    offset: int
    data: str


@dataclass
class AppendResult:
    stored: list[Chunk] = field(default_factory=list)  # new chunks, to fan out to viewers
    acked: list[Chunk] = field(default_factory=list)  # stored now or before (ack these)
    rejected: list[tuple[Chunk, str]] = field(default_factory=list)
    trials: dict[int, Trial] = field(default_factory=dict)


# The marker stored in place of the bytes a log lost to its size cap: start, the count, then the words.
# static/livelog.js tells it from log text by these two parts (the trial page hands them over, `dropped_marker_json`).
DROPPED_MARKER_START = "\n[… "
DROPPED_MARKER_WORDS = " bytes dropped here: the log passed its size cap; the head and the tail are kept …]\n"


def dropped_marker(dropped_bytes: int) -> str:
    return f"{DROPPED_MARKER_START}{dropped_bytes:,}{DROPPED_MARKER_WORDS}"


def dropped_marker_json() -> str:
    """The marker's parts for the browser: {"start": ..., "words": ...}."""
    return json.dumps({"start": DROPPED_MARKER_START, "words": DROPPED_MARKER_WORDS})


# ---- lines and metrics ------------------------------------------------------------------------


class LineCursor:
    """Cuts complete lines out of one attempt's chunks fed in any order; yields metric lines."""

    def __init__(self) -> None:
        self.next_seq = 0
        self.carry = ""
        self.pending: dict[int, str] = {}
        self.broken = False  # gave up on a gap: the end-of-trial rescan decides
        self.last_count = 0  # metric lines that ended in chunk next_seq - 1

    def feed(self, seq: int, data: str) -> list[tuple[int, int, dict]]:
        if seq < self.next_seq:
            return []
        self.pending[seq] = data
        out: list[tuple[int, int, dict]] = []
        while self.next_seq in self.pending:
            out += self._take(self.next_seq, self.pending.pop(self.next_seq))
        if len(self.pending) > PENDING_LIMIT:
            self.pending.clear()
            self.broken = True
        return out

    def skip_to(self, seq: int) -> None:
        """A gap (dropped or never sent): the line in progress is cut there."""
        self.next_seq = seq
        self.carry = ""

    def _take(self, seq: int, data: str) -> list[tuple[int, int, dict]]:
        self.next_seq = seq + 1
        self.last_count = 0
        text = self.carry + data if self.carry else data
        cut = text.rfind("\n")
        if cut < 0:
            self.carry = text[-CARRY_LIMIT:]
            return []
        self.carry = text[cut + 1 :][-CARRY_LIMIT:]
        if METRIC_PREFIX not in text:  # the fast path: most chunks hold no metric line
            return []
        out = []
        for line in text[:cut].split("\n"):
            if METRIC_PREFIX in line:
                metric = parse_metric_line(line)
                if metric is not None:
                    out.append((seq, self.last_count, metric))
                    self.last_count += 1
        return out

    def flush(self) -> list[tuple[int, int, dict]]:
        """The last line when the output did not end with a newline (at the end of the attempt)."""
        line, self.carry = self.carry, ""
        metric = parse_metric_line(line) if METRIC_PREFIX in line else None
        if metric is None or self.next_seq == 0:
            return []
        return [(self.next_seq - 1, self.last_count, metric)]


class MetricExtractor:
    """Per-process state of live metric extraction: a LineCursor per attempt in flight."""

    def __init__(self) -> None:
        self.cursors: dict[str, LineCursor] = {}

    def cursor(self, session: Session, trial: Trial, attempt_id: str) -> LineCursor:
        cursor = self.cursors.get(attempt_id)
        if cursor is None:
            # First chunk this process sees for the attempt (new, or the server restarted): catch up
            # from what is stored, saving any metric the previous process had not saved.
            cursor = self.cursors[attempt_id] = LineCursor()
            found = _replay(session, trial.id, attempt_id, cursor)  # type: ignore[arg-type]
            _save_metrics(session, trial, found, only_missing=True)
        return cursor

    def forget(self, attempt_id: str | None) -> None:
        if attempt_id:
            self.cursors.pop(attempt_id, None)

    def finish(self, session: Session, trial: Trial, last_seq: int) -> None:
        """At the end of an attempt: the unterminated last line, or a full rescan after gaps."""
        attempt_id = trial.attempt_id or ""
        cursor = self.cursors.pop(attempt_id, None)
        if cursor is not None and not cursor.broken and not cursor.pending and cursor.next_seq == last_seq + 1:
            _save_metrics(session, trial, cursor.flush(), only_missing=True)
            return
        cursor = LineCursor()
        found = _replay(session, trial.id, attempt_id, cursor) + cursor.flush()  # type: ignore[arg-type]
        _save_metrics(session, trial, found, only_missing=True)


def _stored_chunks(session: Session, trial_id: int, attempt_id: str, after: int = -1) -> Iterator[LogChunk]:
    """Stored chunks (tombstones included) in seq order, read a page at a time."""
    while True:
        page = session.exec(
            select(LogChunk)
            .where(LogChunk.trial_id == trial_id, LogChunk.attempt_id == attempt_id, LogChunk.seq > after)
            .order_by(col(LogChunk.seq))
            .limit(READ_PAGE)
        ).all()
        yield from page
        if len(page) < READ_PAGE:
            return
        after = page[-1].seq


def _replay(session: Session, trial_id: int, attempt_id: str, cursor: LineCursor) -> list[tuple[int, int, dict]]:
    found: list[tuple[int, int, dict]] = []
    for row in _stored_chunks(session, trial_id, attempt_id):
        if row.offset == TOMBSTONE_OFFSET or row.seq != cursor.next_seq:
            cursor.skip_to(row.seq + 1 if row.offset == TOMBSTONE_OFFSET else row.seq)
            if row.offset == TOMBSTONE_OFFSET:
                continue
        found += cursor.feed(row.seq, row.data)
    return found


def _save_metrics(session: Session, trial: Trial, found: list[tuple[int, int, dict]], *, only_missing: bool) -> None:
    if not found:
        return
    if only_missing:
        have = set(session.exec(select(Metric.seq, Metric.index).where(Metric.trial_id == trial.id)).all())
        found = [f for f in found if (f[0], f[1]) not in have]
    now = utcnow()
    rows = [
        {
            "trial_id": trial.id,
            "approach_id": trial.approach_id,
            "campaign_id": trial.campaign_id,
            "seq": seq,
            "index": index,
            "name": m["name"][:120],
            "value": m["value"],
            "unit": m["unit"][:40],
            "tags": m["tags"],
            "samples": m.get("samples"),
            **statistics.summary_columns(m.get("samples")),
            "created_at": now,
        }
        for seq, index, m in found
    ]
    if rows:
        session.execute(insert(Metric), rows)


# ---- append -----------------------------------------------------------------------------------


def append_chunks(
    session: Session, chunks: Iterable[Chunk], *, runner_id: int, cap_bytes: int, metrics: MetricExtractor | None = None
) -> AppendResult:
    """Store a batch of chunks from one runner in the caller's transaction (ack them after commit)."""
    result = AppendResult()
    groups: dict[tuple[int, str], list[Chunk]] = {}
    for chunk in chunks:
        groups.setdefault((chunk.trial_id, chunk.attempt_id), []).append(chunk)
    for (trial_id, attempt_id), received in groups.items():
        trial = result.trials.get(trial_id) or session.get(Trial, trial_id)
        try:
            if trial is None:
                raise StaleAttempt(f"no trial #{trial_id}")
            current_trial(session, _Ref(trial_id, attempt_id), runner_id)  # type: ignore[arg-type]
        except StaleAttempt as exc:
            result.rejected += [(c, exc.reason) for c in received]
            continue
        result.trials[trial_id] = trial
        result.acked += received  # every copy is acked, stored or not
        by_seq: dict[int, Chunk] = {}
        for c in received:
            by_seq.setdefault(c.seq, c)
        _append_attempt(session, trial, attempt_id, by_seq, cap_bytes, metrics, result)
    return result


@dataclass(frozen=True)
class _Ref:
    trial_id: int
    attempt_id: str


def _append_attempt(
    session: Session,
    trial: Trial,
    attempt_id: str,
    by_seq: dict[int, Chunk],
    cap_bytes: int,
    metrics: MetricExtractor | None,
    result: AppendResult,
) -> None:
    seqs = sorted(by_seq)
    have = set(
        session.exec(
            select(LogChunk.seq).where(
                LogChunk.trial_id == trial.id, LogChunk.attempt_id == attempt_id, col(LogChunk.seq).in_(seqs)
            )
        ).all()
    )
    head_limit = cap_bytes // 2
    tomb_seq = _tombstone_seq(session, trial, attempt_id) if trial.log_dropped_bytes else None
    new = []
    for seq in seqs:
        chunk = by_seq[seq]
        if seq in have:
            continue
        if tomb_seq is not None and seq < tomb_seq and chunk.offset >= head_limit:
            continue  # a resend of a chunk the cap dropped already
        new.append(chunk)
    if not new:
        return
    now = utcnow()
    session.execute(
        insert(LogChunk),
        [
            {
                "trial_id": c.trial_id,
                "attempt_id": c.attempt_id,
                "seq": c.seq,
                "offset": c.offset,
                "data": c.data,
                "created_at": now,
            }
            for c in new
        ],
    )
    result.stored += new
    if metrics is not None:
        cursor = metrics.cursor(session, trial, attempt_id)
        found: list[tuple[int, int, dict]] = []
        for c in new:
            found += cursor.feed(c.seq, c.data)
        _save_metrics(session, trial, found, only_missing=False)
    trial.log_bytes += sum(len(c.data.encode()) for c in new)
    if trial.log_bytes - trial.log_dropped_bytes > cap_bytes:
        _drop_tail(session, trial, attempt_id, cap_bytes, tomb_seq)
    session.add(trial)


def _tombstone_seq(session: Session, trial: Trial, attempt_id: str) -> int | None:
    return session.exec(
        select(LogChunk.seq).where(
            LogChunk.trial_id == trial.id, LogChunk.attempt_id == attempt_id, LogChunk.offset == TOMBSTONE_OFFSET
        )
    ).first()


def _drop_tail(session: Session, trial: Trial, attempt_id: str, cap_bytes: int, tomb_seq: int | None) -> None:
    """Delete the oldest chunks after the head until the trial is back under its cap."""
    excess = trial.log_bytes - trial.log_dropped_bytes - cap_bytes
    freed, ids, last = 0, [], tomb_seq
    head_limit = cap_bytes // 2
    while freed < excess:
        query = sa_select(col(LogChunk.id), col(LogChunk.seq), col(LogChunk.data)).where(
            col(LogChunk.trial_id) == trial.id,
            col(LogChunk.attempt_id) == attempt_id,
            col(LogChunk.offset) >= head_limit,
        )
        if last is not None:
            query = query.where(col(LogChunk.seq) > last)
        rows = session.execute(query.order_by(col(LogChunk.seq)).limit(256)).all()
        if not rows:
            break
        for row_id, seq, data in rows:
            if freed >= excess:
                break
            ids.append(row_id)
            freed += len(data.encode())
            last = seq
    if not ids:
        return
    session.execute(delete(LogChunk).where(LogChunk.id.in_(ids)))  # type: ignore[union-attr]
    if tomb_seq is None:
        session.execute(
            insert(LogChunk),
            [
                {
                    "trial_id": trial.id,
                    "attempt_id": attempt_id,
                    "seq": last,
                    "offset": TOMBSTONE_OFFSET,
                    "data": "",
                    "created_at": utcnow(),
                }
            ],
        )
    else:
        session.execute(
            update(LogChunk)
            .where(
                col(LogChunk.trial_id) == trial.id,
                col(LogChunk.attempt_id) == attempt_id,
                col(LogChunk.offset) == TOMBSTONE_OFFSET,
            )
            .values(seq=last)
        )
    trial.log_dropped_bytes += freed


# ---- read -------------------------------------------------------------------------------------


def read_after(
    session: Session, trial: Trial, after_seq: int = -1, limit: int | None = None, max_bytes: int | None = None
) -> list[tuple[int, str, bool]]:
    """(seq, text, is_marker) of the current attempt's stored chunks after `after_seq`, in seq order: at most
    `limit` chunks, and no more once `max_bytes` of text have been read (a page of large chunks stays small).
    The cap's tombstone reads as a marker (is_marker: the seqs before it were dropped, not missing)."""
    out: list[tuple[int, str, bool]] = []
    if not trial.attempt_id:
        return out
    size = 0
    # Bounded pages read only what they keep: about one chunk in 64 KiB of the byte budget per row.
    page = min(READ_PAGE, limit or READ_PAGE, max(1, (max_bytes or 0) // 65536) if max_bytes else READ_PAGE)
    while True:
        rows = session.exec(
            select(LogChunk)
            .where(LogChunk.trial_id == trial.id, LogChunk.attempt_id == trial.attempt_id, LogChunk.seq > after_seq)
            .order_by(col(LogChunk.seq))
            .limit(page)
        ).all()
        for row in rows:
            marker = row.offset == TOMBSTONE_OFFSET
            out.append((row.seq, dropped_marker(trial.log_dropped_bytes) if marker else row.data, marker))
            size += len(row.data)
            if (limit is not None and len(out) >= limit) or (max_bytes is not None and size >= max_bytes):
                return out
        if len(rows) < page:
            return out
        after_seq = rows[-1].seq
        page = min(READ_PAGE, page * 4)


def iter_full_log(session: Session, trial: Trial) -> Iterator[str]:
    """The whole stored log of a trial, every attempt in order (a header before each when there are several)."""
    attempts = session.exec(select(Attempt).where(Attempt.trial_id == trial.id).order_by(col(Attempt.number))).all()
    for attempt in attempts:
        if len(attempts) > 1:
            yield f"\n===== attempt {attempt.number} ({attempt.id}) =====\n"
        for row in _stored_chunks(session, trial.id, attempt.id):  # type: ignore[arg-type]
            yield dropped_marker(trial.log_dropped_bytes) if row.offset == TOMBSTONE_OFFSET else row.data


def full_text(session: Session, trial: Trial) -> str:
    return "".join(iter_full_log(session, trial))


def head_and_tail(session: Session, trial: Trial, head_bytes: int = 256 * 1024, tail_bytes: int = 1024 * 1024) -> str:
    """The start and the end of the current attempt's log (what failure signatures look at),
    without reading a long log whole."""
    if not trial.attempt_id:
        return ""
    where = (LogChunk.trial_id == trial.id, LogChunk.attempt_id == trial.attempt_id, LogChunk.offset >= 0)
    head, size, last_head = [], 0, -1
    for seq, data in session.exec(
        select(LogChunk.seq, LogChunk.data).where(*where).order_by(col(LogChunk.seq)).limit(256)
    ):
        if size >= head_bytes:
            break
        head.append(data)
        size += len(data)
        last_head = seq
    tail, size = [], 0
    for _seq, data in session.exec(
        select(LogChunk.seq, LogChunk.data)
        .where(*where, LogChunk.seq > last_head)
        .order_by(col(LogChunk.seq).desc())
        .limit(256)
    ):
        if size >= tail_bytes:
            break
        tail.append(data)
        size += len(data)
    return "".join(head) + "".join(reversed(tail))


def last_contiguous_seq(session: Session, trial_id: int, attempt_id: str) -> int:
    """The highest seq S such that every chunk 0..S is stored or covered by the cap's tombstone (-1: none)."""
    expected = 0
    for seq, offset in session.exec(
        select(LogChunk.seq, LogChunk.offset)
        .where(LogChunk.trial_id == trial_id, LogChunk.attempt_id == attempt_id)
        .order_by(col(LogChunk.seq))
    ):
        if offset == TOMBSTONE_OFFSET:
            expected = seq + 1
        elif seq == expected:
            expected += 1
        elif seq > expected:
            break
    return expected - 1
