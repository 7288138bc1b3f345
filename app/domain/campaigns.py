"""The approach inventory: campaigns, approaches in priority order, a person's status changes with history.

An approach's status is what a person decided (`change_status`); what its trial is doing (queued, running)
is its activity, read from the trial (`activities`), and a trial's queueing and end are events in its
history (`trial_event`), which change no status."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, tuple_
from sqlmodel import Session, col, select

from app.domain import read_only  # noqa: F401  (installs the archived campaigns' read-only check)
from app.domain.acceptance import accept_length_bound_error
from app.domain.errors import Conflict, Invalid, Moved, NotFound, or_not_found
from app.models import (
    ACTIVE_TRIAL_STATES,
    Activity,
    Approach,
    ApproachStatus,
    Artifact,
    Campaign,
    CampaignSlug,
    HistoryKind,
    Metric,
    RunOrder,
    Settle,
    StatusChange,
    Trial,
    TrialState,
    utcnow,
)
from app.schemas import NEEDS_REASON, ApproachCreate, ApproachUpdate, CampaignCreate, CampaignUpdate

STATUS_ORDER = list(ApproachStatus)


def list_campaigns(session: Session, *, archived: bool = False) -> list[Campaign]:
    """The active campaigns (the front page), or the archived ones."""
    archived_at = col(Campaign.archived_at)
    query = select(Campaign).where(archived_at.is_not(None) if archived else archived_at.is_(None))
    return list(session.exec(query.order_by(Campaign.name)))


def _redirects_to(session: Session, slug: str) -> str | None:
    """The slug of the campaign that `slug` was before a rename (its old URLs redirect there), or None."""
    query = (
        select(Campaign.slug)
        .join(CampaignSlug, col(CampaignSlug.campaign_id) == col(Campaign.id))
        .where(CampaignSlug.slug == slug)
    )
    return session.exec(query).first()


def get_campaign(session: Session, slug: str) -> Campaign:
    """The campaign by its slug; a slug it had before a rename is `Moved` (its URLs redirect)."""
    campaign = session.exec(select(Campaign).where(Campaign.slug == slug)).first()
    if campaign is None:
        moved = _redirects_to(session, slug)
        if moved is not None:
            raise Moved(f"Campaign {slug!r} was renamed: it is {moved!r} now.", old=slug, slug=moved)
        raise NotFound(f"No campaign named {slug!r}.")
    return campaign


def slug_taken(session: Session, slug: str) -> str | None:
    """Why `slug` cannot name a new campaign (or a renamed one): a campaign has it, or it redirects to one."""
    if session.exec(select(Campaign.id).where(Campaign.slug == slug)).first() is not None:
        return f"A campaign named {slug!r} exists already."
    owner = _redirects_to(session, slug)
    if owner is not None:
        return f"{slug!r} was campaign {owner!r}'s slug and its old links redirect there: choose another."
    return None


def create_campaign(session: Session, data: CampaignCreate) -> Campaign:
    taken = slug_taken(session, data.slug)
    if taken:
        raise Conflict(taken, field="slug")
    campaign = Campaign(**data.model_dump())
    session.add(campaign)
    session.flush()
    return campaign


def update_campaign(session: Session, campaign: Campaign, data: CampaignUpdate) -> Campaign:
    changes = data.model_dump(exclude_unset=True)
    tau, steps = changes.get("accept_length", campaign.accept_length), changes.get("draft_steps", campaign.draft_steps)
    if tau is not None and steps is not None:  # the body's value against the stored other (acceptance.py's bound)
        error = accept_length_bound_error(tau, steps, "draft step")
        if error:
            raise Invalid(error, field="accept_length" if "accept_length" in changes else "draft_steps")
    _set_fields(session, campaign, changes)
    return campaign


def _set_fields(session: Session, row: Campaign | Approach, values: dict[str, Any]) -> None:
    """An update's fields set on its campaign or approach, which is then updated now."""
    for name, value in values.items():
        setattr(row, name, value)
    row.updated_at = utcnow()
    session.add(row)
    session.flush()


def approaches(session: Session, campaign: Campaign, *, archived: bool | None = None) -> list[Approach]:
    """The campaign's approaches in priority order: all of them, or only the active (`archived=False`) or
    the archived ones. Archived approaches keep their trials, so answers and charts still read them."""
    query = select(Approach).where(Approach.campaign_id == campaign.id)
    if archived is not None:
        query = query.where(col(Approach.archived_at).is_not(None) if archived else col(Approach.archived_at).is_(None))
    return list(session.exec(query.order_by(col(Approach.position), col(Approach.id))))


def get_approach(session: Session, campaign: Campaign, key: str) -> Approach:
    query = select(Approach).where(Approach.campaign_id == campaign.id, Approach.key == key)
    return or_not_found(session.exec(query).first(), f"No approach {key!r} in campaign {campaign.slug!r}.")


def campaign_approach(session: Session, slug: str, key: str) -> tuple[Campaign, Approach]:
    """The campaign named by its slug and its approach by key: what an approach's URL names."""
    campaign = get_campaign(session, slug)
    return campaign, get_approach(session, campaign, key)


@dataclass(frozen=True)
class Doing:
    """What an approach's active trial is doing: queued (waiting for or handed to a runner) or running."""

    activity: Activity
    trial_id: int


def activities(session: Session, rows: list[Approach]) -> dict[int, Doing]:
    """approach id -> its active trial's activity (one query; an approach with none is absent)."""
    ids = [a.id for a in rows if a.id is not None]
    if not ids:
        return {}
    found: dict[int, Doing] = {}
    query = (
        select(Trial.approach_id, Trial.id, Trial.state)
        .where(col(Trial.approach_id).in_(ids), col(Trial.state).in_(ACTIVE_TRIAL_STATES))
        .order_by(col(Trial.id))
    )
    for approach_id, trial_id, state in session.exec(query):
        doing = Activity.running if state == TrialState.running else Activity.queued
        if approach_id not in found or doing == Activity.running:
            found[approach_id] = Doing(doing, trial_id or 0)
    return found


AWAITING = "awaiting"  # beside the status of an approach whose ended trial's proposal waits for a person


def status_counts(rows: list[Approach]) -> dict[str, int]:
    """Approaches per decided status (what a person decided; a trial never moves it)."""
    counts = Counter(a.status for a in rows)
    return {s.value: counts.get(s.value, 0) for s in STATUS_ORDER}


def doing_counts(rows: list[Approach], doing: dict[int, Doing]) -> dict[str, int]:
    """Beside the status counts: approaches whose proposal awaits a person, and those queued or running."""
    counts = Counter(d.activity.value for d in doing.values())
    return {
        AWAITING: sum(a.pending_trial_id is not None for a in rows),
        **{a.value: counts.get(a.value, 0) for a in Activity},
    }


def trial_event(session: Session, approach: Approach, trial: Trial, words: str, actor: str) -> StatusChange:
    """A trial's event in the approach's history ("trial #12 queued on gpu-1", "trial #12 succeeded: proposes
    promising"): it changes no status, so it stands at the decided status (from == to)."""
    assert approach.id is not None  # a stored approach
    event = StatusChange(
        approach_id=approach.id,
        from_status=approach.status,
        to_status=approach.status,
        reason=words,
        actor=actor,
        trial_id=trial.id,
        kind=HistoryKind.trial,
    )
    session.add(event)
    session.flush()
    return event


def history(
    session: Session, approach: Approach, *, before: int | None = None, limit: int | None = None
) -> list[StatusChange]:
    """The approach's status changes and its trials' events (`StatusChange.kind`), newest first; a page: at most `limit`, older than change `before`."""
    query = select(StatusChange).where(StatusChange.approach_id == approach.id)
    if before is not None:
        anchor = session.get(StatusChange, before)
        if anchor is None or anchor.approach_id != approach.id:
            raise NotFound(f"No status change #{before} of {approach.key!r}.")
        query = query.where(tuple_(StatusChange.at, StatusChange.id) < tuple_(anchor.at, anchor.id))
    query = query.order_by(col(StatusChange.at).desc(), col(StatusChange.id).desc())
    if limit is not None:
        query = query.limit(limit)
    return list(session.exec(query))


def _check_reason(status: ApproachStatus, reason: str) -> None:
    if status in NEEDS_REASON and not reason.strip():
        raise Invalid(
            f"Moving to {status.value.replace('_', ' ')} needs a reason: say what was tried and what happened.",
            field="reason",
        )


def add_approach(session: Session, campaign: Campaign, data: ApproachCreate, actor: str) -> Approach:
    if session.exec(select(Approach).where(Approach.campaign_id == campaign.id, Approach.key == data.key)).first():
        raise Conflict(f"Approach {data.key!r} exists already in this campaign.", field="key")
    _check_reason(data.status, data.reason)
    last = session.exec(select(func.max(Approach.position)).where(Approach.campaign_id == campaign.id)).one()
    fields: dict[str, Any] = data.model_dump(exclude={"requirements"})
    assert campaign.id is not None  # a stored campaign
    approach = Approach(
        campaign_id=campaign.id,
        position=(last or 0) + 1,
        requirements=data.requirements.model_dump() if data.requirements else None,
        **fields,
    )
    session.add(approach)
    session.flush()
    assert approach.id is not None  # the flush gave it one
    session.add(
        StatusChange(
            approach_id=approach.id,
            from_status="",
            to_status=approach.status,
            reason=data.reason or "added",
            actor=actor,
        )
    )
    session.flush()
    return approach


def update_approach(session: Session, approach: Approach, data: ApproachUpdate) -> Approach:
    values = data.model_dump(exclude_unset=True)
    if "requirements" in values:
        values["requirements"] = data.requirements.model_dump() if data.requirements else None
    _set_fields(session, approach, values)
    return approach


def change_status(
    session: Session,
    approach: Approach,
    to: ApproachStatus | str,
    reason: str,
    actor: str,
    *,
    trial_id: int | None = None,
) -> StatusChange:
    """A person's decision: move an approach to a new status and keep the change as history. It is also the
    verdict on the last ended trial (a waiting proposal is then settled)."""
    try:
        to = ApproachStatus(to)
    except ValueError:
        choices = ", ".join(s.value for s in ApproachStatus)
        raise Invalid(
            f"status: {to!r} is not a status a person decides ({choices}); queued and running are what a "
            "trial is doing, shown beside it",
            field="status",
        ) from None
    if approach.status == to.value:
        raise Conflict(f"The approach is already {to.value.replace('_', ' ')}.", field="status")
    _check_reason(to, reason)
    assert approach.id is not None  # a stored approach
    change = StatusChange(
        approach_id=approach.id,
        from_status=approach.status,
        to_status=to.value,
        reason=reason.strip(),
        actor=actor,
        trial_id=trial_id,
    )
    approach.status = to.value
    approach.reason = reason.strip()
    approach.pending_trial_id = None  # a person's status change is the verdict on the last trial
    approach.updated_at = utcnow()
    session.add(approach)
    session.add(change)
    session.flush()
    return change


def move_approach(session: Session, campaign: Campaign, approach: Approach, position: int) -> None:
    """Put an approach at a 1-based priority position, renumbering the others densely. Reordering by hand
    pins the order: "Run next candidate" then follows the priority, not the payoff ranking."""
    rows = [a for a in approaches(session, campaign) if a.id != approach.id]
    position = max(1, min(position, len(rows) + 1))
    rows.insert(position - 1, approach)
    for index, row in enumerate(rows, start=1):
        if row.position != index:
            row.position = index
            session.add(row)
    campaign.run_order = RunOrder.priority
    session.add(campaign)
    session.flush()


def set_run_order(session: Session, campaign: Campaign, order: RunOrder | str) -> None:
    """What "Run next candidate" follows: the payoff ranking or the priority set by hand."""
    try:
        campaign.run_order = RunOrder(order)
    except ValueError:
        raise Invalid(f"order: expected one of {', '.join(RunOrder)}, not {order!r}", field="order") from None
    session.add(campaign)
    session.flush()


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


@dataclass(frozen=True)
class Evidence:
    """What an approach's delete would remove with it: its measurements and their history."""

    trials: int = 0
    metrics: int = 0
    log_bytes: int = 0
    artifacts: int = 0
    traces: int = 0
    status_changes: int = 0
    settles: int = 0
    active_trial: int | None = None  # a trial of it still queued or running
    adopted: bool = False

    @property
    def measured(self) -> bool:
        """Trials (and so metrics, logs, artifacts): what "keep the measurements" keeps."""
        return self.trials > 0

    def counts(self) -> dict[str, int]:
        fields = ("trials", "metrics", "log_bytes", "artifacts", "traces", "status_changes", "settles")
        return {name: getattr(self, name) for name in fields}

    def sentence(self) -> str:
        """ "3 trials, 240 metrics, 1.2 MB of logs, 2 artifacts (1 trace) and 5 status changes"."""
        parts = [
            _plural(self.trials, "trial"),
            _plural(self.metrics, "metric"),
            f"{self.log_bytes / 1e6:,.1f} MB of logs"
            if self.log_bytes >= 100_000
            else f"{self.log_bytes:,} bytes of logs",
            _plural(self.artifacts, "artifact") + (f" ({_plural(self.traces, 'trace')})" if self.traces else ""),
            _plural(self.status_changes, "status change"),
        ]
        if self.settles:
            parts.append(_plural(self.settles, "settle/repeat record"))
        return ", ".join(parts[:-1]) + " and " + parts[-1]

    def confirm(self, title: str) -> str:
        """The page's confirm before a delete that takes the evidence with it."""
        adopted = (
            f" {title} is ADOPTED: its trials are the evidence the campaign's decision rests on."
            if self.adopted
            else ""
        )
        return (
            f"Delete {title} for good? This also deletes {self.sentence()}.{adopted} Archive it instead to keep them."
        )


def evidence(session: Session, approach: Approach) -> Evidence:
    """Counts of what deleting the approach would remove (a few COUNTs over indexed columns)."""
    trial_ids = select(Trial.id).where(Trial.approach_id == approach.id)
    trials, log_bytes = session.exec(
        select(func.count(col(Trial.id)), func.coalesce(func.sum(col(Trial.log_bytes)), 0)).where(
            Trial.approach_id == approach.id
        )
    ).one()
    artifacts, traces = session.exec(
        select(func.count(col(Artifact.id)), func.count(col(Artifact.trace))).where(
            col(Artifact.trial_id).in_(trial_ids)
        )
    ).one()
    active = session.exec(
        select(Trial.id).where(Trial.approach_id == approach.id, col(Trial.state).in_(ACTIVE_TRIAL_STATES))
    ).first()
    settles = session.exec(
        select(func.count(col(Settle.id))).where(
            (col(Settle.approach_a_id) == approach.id) | (col(Settle.approach_b_id) == approach.id)
        )
    ).one()
    return Evidence(
        trials=int(trials),
        metrics=int(session.exec(select(func.count(col(Metric.id))).where(Metric.approach_id == approach.id)).one()),
        log_bytes=int(log_bytes),
        artifacts=int(artifacts),
        traces=int(traces),
        status_changes=int(
            session.exec(select(func.count(col(StatusChange.id))).where(StatusChange.approach_id == approach.id)).one()
        ),
        settles=int(settles),
        active_trial=active,
        adopted=approach.status == ApproachStatus.adopted,
    )


def _refuse_while_active(approach: Approach, found: Evidence, verb: str) -> None:
    if found.active_trial is not None:
        raise Conflict(
            f"{approach.title} has trial #{found.active_trial} queued or running: cancel it before you {verb} it."
        )


def archive_approach(session: Session, campaign: Campaign, approach: Approach, actor: str) -> Evidence:
    """Off the active list and out of "run next", with every trial, metric, log and artifact kept (answers,
    charts and comparisons still read them); `restore_approach` brings it back. Returns what it keeps."""
    found = evidence(session, approach)
    if approach.archived_at is not None:
        raise Conflict(f"{approach.title} is archived already.")
    _refuse_while_active(approach, found, "archive")
    approach.archived_at = utcnow()
    approach.updated_at = approach.archived_at
    session.add(approach)
    session.flush()
    return found


def restore_approach(session: Session, campaign: Campaign, approach: Approach) -> None:
    if approach.archived_at is None:
        raise Conflict(f"{approach.title} is not archived.")
    approach.archived_at = None
    approach.updated_at = utcnow()
    session.add(approach)
    session.flush()


def delete_approach(
    session: Session, campaign: Campaign, approach: Approach, *, delete_evidence: bool = False
) -> Evidence:
    """Delete the approach; returns what went with it. An approach with trials is refused (409, saying what
    it holds and that archiving keeps it) unless `delete_evidence`: measurements go only when asked for."""
    found = evidence(session, approach)
    _refuse_while_active(approach, found, "delete")
    if found.measured and not delete_evidence:
        adopted = (
            " It is adopted: its trials are the evidence the campaign's decision rests on." if found.adopted else ""
        )
        raise Conflict(
            f"{approach.title} has {found.sentence()}.{adopted} Archive it to keep them (it leaves the active list "
            "and can be restored), or delete them with it explicitly (delete_evidence).",
            field="delete_evidence",
        )
    session.delete(approach)
    session.flush()
    for index, row in enumerate(approaches(session, campaign), start=1):
        if row.position != index:
            row.position = index
            session.add(row)
    session.flush()
    return found
