"""An approach's history as a person reads it (issue 45): its decisions first, each with the trial events
(queued, started, ended) that came after it folded under it, newest first.

An entry is a decision or a trial event by its kind (`StatusChange.kind`, migration 0019): "status" (a person
wrote it) is a decision, "trial" is a trial event, and a kind this code does not know is a trial event when it
names a trial, else a decision (shown, never buried). Paging cuts at decisions, so a
decision's events always come on its page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlmodel import Session

from app.domain import campaigns
from app.models import Approach, HistoryKind, StatusChange

DECISION_KINDS = frozenset({HistoryKind.status.value})  # kinds of history row a person writes
EVENT_KINDS = frozenset({HistoryKind.trial.value})  # kinds a trial writes
MAX_ROWS = 500  # rows read for a page: past them, its events continue on the next page


def is_decision(row: StatusChange) -> bool:
    if row.kind in DECISION_KINDS or row.kind in EVENT_KINDS:
        return row.kind in DECISION_KINDS
    return row.trial_id is None


@dataclass
class HistoryGroup:
    """A decision (None: events older than any decision kept) and the trial events after it, newest first."""

    decision: StatusChange | None
    events: list[StatusChange] = field(default_factory=list)

    @property
    def trial_ids(self) -> list[int]:
        return list(dict.fromkeys(e.trial_id for e in self.events if e.trial_id is not None))


def fold(rows: Sequence[StatusChange]) -> list[HistoryGroup]:
    """Rows newest first -> groups newest first: each event goes under the newest decision older than it."""
    groups: list[HistoryGroup] = []
    waiting: list[StatusChange] = []
    for row in rows:
        if is_decision(row):
            groups.append(HistoryGroup(row, waiting))
            waiting = []
        else:
            waiting.append(row)
    if waiting:
        groups.append(HistoryGroup(None, waiting))
    return groups


def folded_history(
    session: Session, approach: Approach, *, before: int | None = None, limit: int = 20
) -> tuple[list[HistoryGroup], int | None]:
    """A page of `limit` decisions with their events, and the id of the last decision shown when older ones
    remain (ask the next page `before` it), else None."""
    # One statement whatever the history's size: at most MAX_ROWS rows a page.
    rows = campaigns.history(session, approach, before=before, limit=MAX_ROWS + 1)
    exhausted = len(rows) <= MAX_ROWS
    rows = rows[:MAX_ROWS]
    groups = fold(rows)
    decided = [g for g in groups if g.decision is not None]
    if len(decided) > limit:  # cut after the limit-th decision: the next page starts below it
        return _through(groups, decided[limit - 1])
    if exhausted:
        return groups, None
    if decided:  # a page full of events: up to the last decision read, the rest comes again next page
        return _through(groups, decided[-1])
    return groups, rows[-1].id  # events only: they continue on the next page


def _through(groups: list[HistoryGroup], last: HistoryGroup) -> tuple[list[HistoryGroup], int | None]:
    end = next(i for i, g in enumerate(groups) if g is last)
    return groups[: end + 1], last.decision.id if last.decision is not None else None


def _entry(row: StatusChange) -> str:
    kind = getattr(row, "kind", None)
    what = f"{row.from_status} -> {row.to_status}" if row.from_status else row.to_status
    if kind is not None and kind not in DECISION_KINDS:
        what = f"{kind} event"
    trial = f" trial #{row.trial_id}" if row.trial_id is not None else ""
    reason = f": {row.reason}" if row.reason else ""
    return f"{row.at:%Y-%m-%d %H:%M:%S} {what} by {row.actor or 'unknown'}{trial}{reason}"


def history_lines(groups: Sequence[HistoryGroup]) -> list[str]:
    """The folded history as text (the CLI): a decision a line, its trial events indented under it."""
    lines = []
    for g in groups:
        lines.append(_entry(g.decision) if g.decision is not None else "trial events")
        lines += [f"    {_entry(e)}" for e in g.events]
    return lines
