"""Notifications: destinations (Apprise URLs) and the durable outbox of what to tell them.

An event (a trial ended, a verdict confirmed, a runner lost, ...) is recorded once by `record` (`EventRecord`),
in the transaction of the event itself, whoever follows it; that one record feeds the outbox (a row per
destination that follows it) and the people's inboxes (app/domain/inbox.py: who watches its campaign or
approach). Nothing is told that did not
happen, and nothing that happened is lost when the server dies before delivering it. The hub's notifier
(app/services/notifier.py) delivers the outbox: due rows are claimed, sent through Apprise (a burst to one
destination becomes one digest), then marked sent, or retried with backoff until MAX_ATTEMPTS. A row
claimed by a server that was killed goes back to pending when the next one starts (at-least-once; each
row's `dedupe_key` keeps an event from being written twice).

Destination URLs hold secrets (webhook tokens, passwords): only `redacted` is shown or logged, and neither
the share page nor the campaign export reads this module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import apprise
from sqlalchemy import func, insert, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlmodel import Session, col, select

from app.domain import fingerprint as stack
from app.domain import inbox
from app.domain import runners as runner_domain
from app.domain.errors import Invalid, or_not_found
from app.models import (
    ACTIVE_TRIAL_STATES,
    Approach,
    Campaign,
    DeliveryState,
    EventRecord,
    NotificationEvent,
    NotificationOutbox,
    NotificationTarget,
    Replay,
    Runner,
    Trial,
    aware,
    utcnow,
)

EVENTS: tuple[str, ...] = tuple(e.value for e in NotificationEvent if e != NotificationEvent.test)
MAX_ATTEMPTS = 8
MAX_BACKOFF_S = 300.0
# At most one message per destination per this many seconds: a burst waits and goes as one digest
# (1,000 trial ends in a minute are at most 10 messages).
COALESCE_S = 6.0
DIGEST_LINES = 40  # a digest lists this many events, then "and N more"
CLAIM_LIMIT = 2000  # events one message may carry
STALE_CLAIM_S = 120.0  # a claim older than this is a delivery that died: deliver again
MAX_URL = 2000
INBOX_WAITING_HOURS = NotificationTarget.model_fields["waiting_hours"].default  # a destination's default, 4 h


def redact(url: str) -> str:
    """What may be shown of a destination URL: Apprise's own privacy form (passwords and tokens masked),
    without the query string, and any path segment that looks like a token (a webhook's secret) masked to its ends."""
    plugin = apprise.Apprise.instantiate(url)
    if plugin is None:
        raise Invalid("not a notification URL Apprise knows (e.g. slack://, msteams://, json://, ntfy://)", field="url")
    private = plugin.url(privacy=True)
    parts = urlsplit(private)
    path = "/".join(_mask(seg) for seg in parts.path.split("/"))
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))[:500]


def _mask(segment: str) -> str:
    # A token looks random: long, or of some length with digits in it ("services" stays, "0a9f31c2..." goes).
    secret = len(segment) >= 16 or (len(segment) >= 8 and any(ch.isdigit() for ch in segment))
    return f"{segment[0]}...{segment[-1]}" if secret and "..." not in segment else segment


def parse_events(names: Iterable[str]) -> list[str]:
    chosen = sorted({n.strip() for n in names if n.strip()})
    if not chosen:
        raise Invalid(f"pick at least one event: {', '.join(EVENTS)}", field="events")
    unknown = [n for n in chosen if n not in EVENTS]
    if unknown:
        raise Invalid(f"unknown event {unknown[0]!r}: one of {', '.join(EVENTS)}", field="events")
    return chosen


def create_target(
    session: Session,
    url: str,
    events: Iterable[str],
    *,
    campaign: Campaign | None,
    actor: str,
    waiting_hours: float = 4.0,
) -> NotificationTarget:
    url = url.strip()
    if not url or len(url) > MAX_URL:
        raise Invalid(f"a notification URL of 1 to {MAX_URL} characters", field="url")
    if not (0 < waiting_hours <= 24 * 30):
        raise Invalid("between 0 and 720 hours", field="waiting_hours")
    target = NotificationTarget(
        campaign_id=campaign.id if campaign else None,
        url=url,
        redacted=redact(url),
        events=parse_events(events),
        waiting_hours=waiting_hours,
        created_by=actor,
    )
    session.add(target)
    session.flush()
    return target


def list_targets(session: Session) -> list[tuple[NotificationTarget, str | None]]:
    """Every destination, with its campaign's slug (None: board-wide), newest first."""
    rows = session.exec(
        select(NotificationTarget, Campaign.slug)
        .join(Campaign, col(Campaign.id) == col(NotificationTarget.campaign_id), isouter=True)
        .order_by(col(NotificationTarget.id).desc())
    ).all()
    return [(t, slug) for t, slug in rows]


def get_target(session: Session, target_id: int) -> NotificationTarget:
    target = session.get(NotificationTarget, target_id)
    return or_not_found(target, f"no notification destination #{target_id}", field="notification")


def disable_target(session: Session, target: NotificationTarget) -> NotificationTarget:
    """It stops getting new events; what it already has in the outbox is still delivered."""
    if target.disabled_at is None:
        target.disabled_at = utcnow()
        session.add(target)
    return target


def deliveries(session: Session, target: NotificationTarget, limit: int = 200) -> list[NotificationOutbox]:
    """The destination's delivery log, newest first."""
    return list(
        session.exec(
            select(NotificationOutbox)
            .where(NotificationOutbox.target_id == target.id)
            .order_by(col(NotificationOutbox.id).desc())
            .limit(limit)
        ).all()
    )


def delivery_counts(session: Session) -> dict[int, dict[str, int]]:
    """Per destination: how many outbox rows are in each state (the list's summary column)."""
    out: dict[int, dict[str, int]] = {}
    rows = session.exec(
        select(NotificationOutbox.target_id, NotificationOutbox.state, func.count()).group_by(
            col(NotificationOutbox.target_id), col(NotificationOutbox.state)
        )
    ).all()
    for target_id, state, n in rows:
        out.setdefault(target_id, {})[state] = n
    return out


@dataclass(frozen=True)
class Event:
    """One thing that happened, said once for every destination: a title, a body (with the stack where it
    matters) and a link (a path on the board)."""

    name: str
    dedupe_key: str
    title: str
    body: str
    link: str = ""
    campaign_id: int | None = None
    approach_id: int | None = None


def _event_record(session: Session, event: Event) -> EventRecord:
    """The one record of `event` (by its dedupe key): written the first time, found every other. Another
    transaction may record the same event at once: the insert then does nothing (no savepoint, no error that
    would undo the caller's transaction) and the row it committed is read."""
    key = event.dedupe_key[:200]
    found = session.exec(select(EventRecord).where(EventRecord.dedupe_key == key)).first()
    if found is not None:
        return found
    dialect_insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    session.execute(
        dialect_insert(EventRecord)
        .values(
            event=str(event.name),
            dedupe_key=key,
            title=event.title[:300],
            body=event.body,
            link=event.link[:500],
            campaign_id=event.campaign_id,
            approach_id=event.approach_id,
            created_at=utcnow(),
        )
        .on_conflict_do_nothing(index_elements=["dedupe_key"])
    )
    return session.exec(select(EventRecord).where(EventRecord.dedupe_key == key)).one()


def record(
    session: Session, event: Event, *, force_target: NotificationTarget | None = None, to_inbox: bool = True
) -> int:
    """Record `event` once (`EventRecord`) and write it to the outbox of every enabled destination that follows
    it (the campaign's and the board-wide ones) and, with `to_inbox`, to the inbox of everyone who watches its
    campaign or approach (app/domain/inbox.py), in the caller's transaction. Returns how many outbox rows were
    written; an event already written (same dedupe key) is not written again. A test message is no event: it
    goes to its destination alone."""
    stored = None if event.name == NotificationEvent.test else _event_record(session, event)
    if stored is not None and to_inbox:
        inbox.deliver(session, stored)
    if force_target is not None:
        targets = [force_target]
    else:
        candidates = session.exec(
            select(NotificationTarget).where(
                col(NotificationTarget.disabled_at).is_(None),
                (col(NotificationTarget.campaign_id).is_(None))
                | (col(NotificationTarget.campaign_id) == event.campaign_id),
            )
        ).all()
        targets = [t for t in candidates if event.name in (t.events or [])]
    if not targets:
        return 0
    have = set(
        session.exec(
            select(NotificationOutbox.target_id).where(
                NotificationOutbox.dedupe_key == event.dedupe_key[:200],
                col(NotificationOutbox.target_id).in_([t.id for t in targets]),
            )
        ).all()
    )
    now = utcnow()
    rows = [
        {
            "target_id": t.id,
            "event_id": stored.id if stored is not None else None,
            "event": event.name,
            "dedupe_key": event.dedupe_key[:200],
            "title": event.title[:300],
            "body": event.body,
            "link": event.link[:500],
            "state": DeliveryState.pending.value,
            "attempts": 0,
            "next_attempt_at": now,
            "last_error": "",
            "batch_size": 0,
            "created_at": now,
        }
        for t in targets
        if t.id not in have
    ]
    if rows:
        session.execute(insert(NotificationOutbox), rows)
    return len(rows)


# --- the events the board tells -------------------------------------------------------------------------


def _stack(fingerprint: dict[str, Any] | None) -> str:
    return runner_domain.summary(fingerprint) if fingerprint else "unknown stack"


def trial_ended(session: Session, trial: Trial, proposed: tuple[str, str] | None = None) -> None:
    """trial.ended: the trial's end with its proposed verdict (status, reason: app/domain/proposals.py
    `propose`, passed in by the caller, which may import it); queue.drained when it was the campaign's last
    active trial."""
    approach = session.get(Approach, trial.approach_id)
    key = approach.key if approach else f"approach #{trial.approach_id}"
    state = str(trial.state).replace("_", " ")
    lines = [f"Trial #{trial.id} of {key} {state}."]
    if proposed is not None:
        status, reason = proposed
        lines.append(f"Proposed verdict: {status.replace('_', ' ')}" + (f" ({reason})" if reason else ""))
    lines.append(f"Stack: {_stack(trial.fingerprint)}")
    record(
        session,
        Event(
            NotificationEvent.trial_ended,
            f"trial.ended:{trial.id}",
            f"{key}: trial #{trial.id} {state}",
            "\n".join(lines),
            f"/trials/{trial.id}",
            trial.campaign_id,
            trial.approach_id,
        ),
    )
    still = session.exec(
        select(Trial.id).where(Trial.campaign_id == trial.campaign_id, col(Trial.state).in_(ACTIVE_TRIAL_STATES))
    ).first()
    if still is None:
        campaign = session.get(Campaign, trial.campaign_id)
        slug = campaign.slug if campaign else str(trial.campaign_id)
        record(
            session,
            Event(
                NotificationEvent.queue_drained,
                f"queue.drained:{trial.id}",
                f"{slug}: nothing left to run",
                f"The last queued or running trial of {slug} ended (trial #{trial.id}).",
                f"/campaigns/{slug}",
                trial.campaign_id,
            ),
        )


def verdict_confirmed(session: Session, approach: Approach, trial: Trial | None, actor: str) -> None:
    campaign = session.get(Campaign, approach.campaign_id)
    slug = campaign.slug if campaign else str(approach.campaign_id)
    at = f" on {_stack(approach.verdict_fingerprint)}" if approach.verdict_fingerprint else ""
    record(
        session,
        Event(
            NotificationEvent.verdict_confirmed,
            f"verdict.confirmed:{approach.id}:{trial.id if trial else 'none'}:{approach.status}",
            f"{slug}/{approach.key}: {approach.status}",
            f"{actor} confirmed {approach.key} as {approach.status}{at}."
            + (f"\nReason: {approach.reason}" if approach.reason else ""),
            f"/campaigns/{slug}/approaches/{approach.key}",
            approach.campaign_id,
            approach.id,
        ),
    )


def replay_finished(session: Session, campaign: Campaign, replay: Replay, lines: Sequence[str]) -> None:
    """replay.finished: every trial of a replay ended; one line per approach (before -> after)."""
    record(
        session,
        Event(
            NotificationEvent.replay_finished,
            f"replay.finished:{replay.id}",
            f"{campaign.slug}: replay #{replay.id} on {replay.runner_name} finished",
            f"Replay #{replay.id} on {replay.runner_name} ({_stack(replay.runner_fingerprint)}) finished.\n"
            + "\n".join(lines),
            f"/campaigns/{campaign.slug}/replays/{replay.id}",
            campaign.id,
        ),
    )


def runner_lost(session: Session, runner_name: str, runner_id: int, lost_trials: Sequence[Trial]) -> None:
    """runner.lost, board-wide and to each campaign whose trial it was running."""
    stamp = utcnow().strftime("%Y%m%dT%H%M")
    campaigns: set[int | None] = {t.campaign_id for t in lost_trials} or {None}
    for campaign_id in campaigns:
        trials = ", ".join(f"#{t.id}" for t in lost_trials if t.campaign_id == campaign_id)
        record(
            session,
            Event(
                NotificationEvent.runner_lost,
                f"runner.lost:{runner_id}:{stamp}:{campaign_id}",
                f"Runner {runner_name} lost",
                f"Runner {runner_name} stopped answering." + (f" Lost trials: {trials}." if trials else ""),
                "/runners",
                campaign_id,
            ),
        )


def _follows(session: Session, event: str) -> bool:
    """Does anyone follow `event`: a destination, or (for an inbox event) a person watching something."""
    targets = session.exec(select(NotificationTarget.events).where(col(NotificationTarget.disabled_at).is_(None)))
    if any(event in (events or []) for events in targets):
        return True
    return event in inbox.INBOX_EVENTS and inbox.anyone_watches(session)


def retest_on_connect(session: Session, runner: Runner) -> int:
    """retest.flagged when a runner connects whose stack differs, in a component a verdict is bound to, from
    the stack the verdict was reached on (and that can run the approach): told once per approach and change."""
    if not runner.fingerprint or not _follows(session, NotificationEvent.retest_flagged):
        return 0
    rows = session.exec(
        select(Approach, Campaign.slug)
        .join(Campaign, col(Campaign.id) == col(Approach.campaign_id))
        .where(col(Approach.bound_to).is_not(None))
    ).all()
    written = 0
    for approach, slug in rows:
        if runner_domain.unmet_requirements(approach.requirements, runner.fingerprint):
            continue
        why = stack.retest_reason(approach.bound_to, approach.verdict_fingerprint, runner.fingerprint)
        if not why:
            continue
        written += record(
            session,
            Event(
                NotificationEvent.retest_flagged,
                f"retest.flagged:{approach.id}:{why}"[:200],
                f"{slug}/{approach.key}: worth a re-test on {runner.name}",
                f"{approach.title} ({approach.status}) was decided on another stack; {runner.name}: {why}.",
                f"/campaigns/{slug}/approaches/{approach.key}",
                approach.campaign_id,
                approach.id,
            ),
        )
    return written


def waiting_verdicts(session: Session, now: datetime | None = None) -> int:
    """verdict.waiting for every ended trial whose verdict has waited longer than a destination's
    `waiting_hours` (checked by the notifier once a minute; each trial told once per destination), and, after
    INBOX_WAITING_HOURS, to the inboxes of those who watch it."""
    now = now or utcnow()
    targets = session.exec(select(NotificationTarget).where(col(NotificationTarget.disabled_at).is_(None))).all()
    targets = [t for t in targets if NotificationEvent.verdict_waiting in (t.events or [])]
    watched = inbox.anyone_watches(session)
    if not targets and not watched:
        return 0
    rows = session.exec(
        select(Approach, Trial, Campaign.slug)
        .join(Trial, col(Trial.id) == col(Approach.pending_trial_id))
        .join(Campaign, col(Campaign.id) == col(Approach.campaign_id))
        .where(col(Approach.pending_trial_id).is_not(None))
    ).all()
    written = 0
    for approach, trial, slug in rows:
        ended = aware(trial.finished_at)
        if ended is None:
            continue
        waited = now - ended
        hours = waited.total_seconds() / 3600

        event = Event(
            NotificationEvent.verdict_waiting,
            f"verdict.waiting:{trial.id}",
            f"{slug}/{approach.key}: a verdict has waited {hours:.0f} h",
            f"Trial #{trial.id} of {approach.key} ended {hours:.1f} hours ago and waits for a verdict.",
            f"/trials/{trial.id}",
            approach.campaign_id,
            approach.id,
        )
        if watched and waited >= timedelta(hours=INBOX_WAITING_HOURS):
            inbox.deliver(session, _event_record(session, event))
        for target in targets:
            if target.campaign_id not in (None, approach.campaign_id):
                continue
            if waited < timedelta(hours=target.waiting_hours):
                continue
            written += record(session, event, force_target=target, to_inbox=False)
    return written


def test_message(session: Session, target: NotificationTarget, actor: str) -> NotificationOutbox:
    stamp = utcnow().isoformat(timespec="milliseconds")
    record(
        session,
        Event(
            NotificationEvent.test,
            f"test:{stamp}",
            f"Campaign Board: test message ({stamp})",
            f"{actor} sent a test message to {target.redacted}.",
            "/notifications",
            target.campaign_id,
        ),
        force_target=target,
    )
    row = session.exec(
        select(NotificationOutbox).where(
            NotificationOutbox.target_id == target.id, NotificationOutbox.dedupe_key == f"test:{stamp}"
        )
    ).one()
    return row


# --- delivery (the notifier's transactions) ---------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    """What one send carries to one destination: one event, or a digest of several."""

    target_id: int
    url: str
    redacted: str
    row_ids: tuple[int, ...]
    title: str
    body: str


def requeue_claims(session: Session, *, older_than_s: float = 0.0) -> int:
    """Rows a delivery claimed but never settled (the server died mid-send) go back to pending."""
    cutoff = utcnow() - timedelta(seconds=older_than_s)
    result = session.execute(
        update(NotificationOutbox)
        .where(
            col(NotificationOutbox.state) == DeliveryState.sending.value,
            col(NotificationOutbox.claimed_at) <= cutoff,
        )
        .values(state=DeliveryState.pending.value, claimed_at=None)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def has_due(session: Session, now: datetime | None = None) -> bool:
    """Anything to deliver now (a read: the notifier opens a write transaction only when there is)."""
    now = now or utcnow()
    return (
        session.exec(
            select(NotificationOutbox.id).where(
                col(NotificationOutbox.state).in_([DeliveryState.pending.value, DeliveryState.retrying.value]),
                col(NotificationOutbox.next_attempt_at) <= now,
            )
        ).first()
        is not None
    )


def follows_waiting(session: Session) -> bool:
    return _follows(session, NotificationEvent.verdict_waiting)


def claim_due(session: Session, base_url: str, now: datetime | None = None) -> list[Message]:
    """Claim what is due, at most one message per destination and per COALESCE_S: a destination with
    several due rows gets one digest of them (up to CLAIM_LIMIT)."""
    now = now or utcnow()
    due = session.exec(
        select(NotificationOutbox.target_id)
        .where(
            col(NotificationOutbox.state).in_([DeliveryState.pending.value, DeliveryState.retrying.value]),
            col(NotificationOutbox.next_attempt_at) <= now,
        )
        .distinct()
    ).all()
    messages: list[Message] = []
    for target_id in due:
        target = session.get(NotificationTarget, target_id)
        if target is None:
            continue
        last = aware(target.last_sent_at)
        if last is not None and (now - last).total_seconds() < COALESCE_S:
            continue
        rows = session.exec(
            select(NotificationOutbox)
            .where(
                NotificationOutbox.target_id == target_id,
                col(NotificationOutbox.state).in_([DeliveryState.pending.value, DeliveryState.retrying.value]),
                col(NotificationOutbox.next_attempt_at) <= now,
            )
            .order_by(col(NotificationOutbox.id))
            .limit(CLAIM_LIMIT)
        ).all()
        if not rows:
            continue
        for row in rows:
            row.state = DeliveryState.sending.value
            row.claimed_at = now
            row.batch_size = len(rows)
            session.add(row)
        target.last_sent_at = now
        session.add(target)
        title, body = compose(rows, base_url)
        messages.append(Message(target_id, target.url, target.redacted, tuple(r.id for r in rows if r.id), title, body))
    session.flush()
    return messages


def compose(rows: Sequence[NotificationOutbox], base_url: str) -> tuple[str, str]:
    """One event as itself; several as a digest: a count per event kind, then the first DIGEST_LINES."""

    def link(row: NotificationOutbox) -> str:
        return f"{base_url.rstrip('/')}{row.link}" if row.link else ""

    if len(rows) == 1:
        row = rows[0]
        return row.title, row.body + (f"\n{link(row)}" if row.link else "")
    kinds: dict[str, int] = {}
    for row in rows:
        kinds[row.event] = kinds.get(row.event, 0) + 1
    summary = ", ".join(f"{n} {name}" for name, n in sorted(kinds.items()))
    lines = [f"{len(rows)} events: {summary}"]
    for row in rows[:DIGEST_LINES]:
        lines.append(f"- {row.title}" + (f" {link(row)}" if row.link else ""))
    if len(rows) > DIGEST_LINES:
        lines.append(f"... and {len(rows) - DIGEST_LINES} more")
    return f"Campaign Board: {len(rows)} events", "\n".join(lines)


_SECRETS = re.compile(r"[a-z][a-z0-9+.-]*://\S+", re.I)


def settle(session: Session, message: Message, error: str | None, now: datetime | None = None) -> None:
    """After a send: its rows are sent, or retried with backoff (failed after MAX_ATTEMPTS). The error
    kept never holds the URL (any URL in it is cut to its scheme)."""
    now = now or utcnow()
    rows = session.exec(select(NotificationOutbox).where(col(NotificationOutbox.id).in_(message.row_ids))).all()
    clean = _SECRETS.sub(lambda m: m.group(0).split("://", 1)[0] + "://…", error or "")[:2000]
    for row in rows:
        if row.state != DeliveryState.sending.value:
            continue  # settled meanwhile (a re-queued claim was delivered by another pass)
        row.claimed_at = None
        row.attempts += 1  # every send counts, the one that delivered too (the log said "attempts 0" for sent)
        if error is None:
            row.state = DeliveryState.sent.value
            row.sent_at = now
            row.last_error = ""
        else:
            row.last_error = clean
            if row.attempts >= MAX_ATTEMPTS:
                row.state = DeliveryState.failed.value
            else:
                row.state = DeliveryState.retrying.value
                row.next_attempt_at = now + timedelta(seconds=backoff_s(row.attempts))
        session.add(row)
    if error is not None:
        # A failure does not hold the coalescing window: the retry's own backoff decides when.
        target = session.get(NotificationTarget, message.target_id)
        if target is not None:
            target.last_sent_at = None
            session.add(target)


def backoff_s(attempts: int) -> float:
    """2, 4, 8, ... seconds, at most MAX_BACKOFF_S."""
    return float(min(MAX_BACKOFF_S, 2.0**attempts))
