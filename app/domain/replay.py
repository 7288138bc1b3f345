"""Campaign replay: "Replay on runner R" re-runs, on R's stack, every approach whose verdict is bound to a
component in which R's stack differs, and reports what changed (docs/planning.md, Replay).

`start` finds those approaches (verdicts.retest_reason_on against R's fingerprint), ranks them by payoff
(planning.payoff_ranking, as "Run next" does) and queues one trial of each through the normal queue,
pinned to R (`Trial.pinned_runner_id`: only R takes them, app/domain/queue.py), in that order. The Replay
row keeps, per approach, what it was before: its status and reason, the trial behind its verdict and the
stack summary it was reached on; and R's fingerprint. `cancel` cancels its queued trials and nothing else
(a trial R already took runs on). `advance_open` (in the transaction in which a runner looks at the queue,
app/services/trials.start_queued, like repeats.advance_open) finishes a replay whose trials have all ended
and writes `replay.finished` to the notification outbox in that transaction. `report`: per approach, the
verdict and figures before and after, what changed status, and the comparison statistics of the headline
metric (comparison.compare_trials across stacks: the ratio interval and its verdict, statistics.Finding; one
trial a side has no verdict unless the campaign holds that point's run-to-run spread on the runner).

Locks on PostgreSQL: `start` takes the campaign row (scheduling.lock_campaign, as run next does); `cancel`
takes the replay row, then each queued trial's (queue.lock_trial), never a runner's; `advance_open` skips
a replay row another transaction holds. Functions flush, never commit.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from app.domain import comparison, notifications, planning, queue, scheduling, statistics, trials, verdicts
from app.domain import fingerprint as stack
from app.domain import runners as runner_domain
from app.domain.campaign_results import Dumps, iso_utc, naive_utc
from app.domain.errors import Invalid, NotFound, or_not_found
from app.models import (
    TERMINAL_TRIAL_STATES,
    Approach,
    ApproachStatus,
    Campaign,
    HistoryKind,
    Replay,
    ReplayState,
    Runner,
    StatusChange,
    Trial,
    TrialState,
    aware,
    utcnow,
)

# A verdict a replay can revisit: the ones a person confirmed (untested has none; queued / running are a trial's).
VERDICTS = (ApproachStatus.promising, ApproachStatus.adopted, ApproachStatus.dead_end, ApproachStatus.deferred)


def _summary(fp: dict[str, Any] | None) -> str:
    return runner_domain.summary(fp) if fp else "unknown stack"


def _verdict_trial(session: Session, approach: Approach) -> int | None:
    """The trial behind the approach's verdict: the newest status change to its status that names a trial."""
    return session.exec(
        select(StatusChange.trial_id)
        .where(
            StatusChange.approach_id == approach.id,
            StatusChange.to_status == approach.status,
            StatusChange.kind == HistoryKind.status,
            col(StatusChange.trial_id).is_not(None),
        )
        .order_by(col(StatusChange.at).desc(), col(StatusChange.id).desc())
    ).first()


def _skip_reason(session: Session, approach: Approach, runner: Runner) -> str | None:
    """Why a replay on `runner` cannot queue a trial of the approach: the one runnability check
    (scheduling.can_run), asked of that runner alone; None when it can."""
    check = scheduling.can_run(session, approach, runner=runner)
    return None if check.able else check.reason


def start(session: Session, campaign: Campaign, runner_id: int, actor: str) -> tuple[Replay, list[Trial]]:
    """A replay on the runner: its trials queued for that runner in payoff order. Refuses (Invalid) when
    nothing would be replayed, saying why (same stack, or each differing approach cannot run there)."""
    runner = or_not_found(session.get(Runner, runner_id), f"No runner #{runner_id}.", field="runner_id")
    if runner.revoked_at is not None:
        raise Invalid(f"runner {runner.name} is revoked", field="runner_id")
    if not runner.fingerprint:
        raise Invalid(f"runner {runner.name} has not reported its stack yet: connect it first", field="runner_id")
    scheduling.lock_campaign(session, campaign)
    differing: list[tuple[Approach, str]] = []
    for approach in planning.approaches(session, campaign):
        # A verdict's binding stays while a trial of it runs (queued / running): that one is skipped, said why.
        if approach.status == ApproachStatus.untested or not stack.bound_components(approach.bound_to):
            continue
        reason = verdicts.retest_reason_on(approach, runner.fingerprint)
        if reason:
            differing.append((approach, reason))
    if not differing:
        raise Invalid(
            f"nothing to replay on {runner.name}: no verdict of {campaign.slug} is bound to a component in which "
            f"its stack ({_summary(runner.fingerprint)}) differs",
            field="runner_id",
        )
    skipped = {a.id: why for a, _ in differing if (why := _skip_reason(session, a, runner))}
    runnable = [a for a, _ in differing if a.id not in skipped]
    if not runnable:
        reasons = "; ".join(f"{a.title}: {skipped[a.id]}" for a, _ in differing)
        raise Invalid(f"nothing to replay on {runner.name}: {reasons}", field="runner_id")
    retest = {a.id: reason for a, reason in differing}
    ranked = planning.payoff_ranking(session, campaign, runnable, {a.id: retest[a.id] for a in runnable})  # type: ignore[misc]
    replay = Replay(
        campaign_id=campaign.id,  # type: ignore[arg-type]
        runner_id=runner.id,
        runner_name=runner.name,
        runner_fingerprint=dict(runner.fingerprint),
        requested_by=actor,
    )
    session.add(replay)
    session.flush()
    entries: list[dict[str, Any]] = []
    queued: list[Trial] = []
    for r in ranked:
        a = r.approach
        before = {
            "approach_id": a.id,
            "key": a.key,
            "title": a.title,
            "status": a.status,
            "reason": a.reason,
            "trial_id": _verdict_trial(session, a),
            "stack": _summary(a.verdict_fingerprint),
            "bound": stack.describe_binding(a.bound_to, a.verdict_fingerprint),
            "retest": retest[a.id],
        }
        trial = scheduling.create_trial(session, a, None, actor)
        trial.replay_id = replay.id
        trial.pinned_runner_id = runner.id
        session.add(trial)
        queued.append(trial)
        entries.append({**before, "replay_trial_id": trial.id})
    entries += [
        {"approach_id": a.id, "key": a.key, "title": a.title, "status": a.status, "skipped": skipped[a.id]}
        for a, _ in differing
        if a.id in skipped
    ]
    replay.entries = entries
    session.add(replay)
    session.flush()
    return replay, queued


def get(session: Session, campaign: Campaign, replay_id: int) -> Replay:
    replay = session.get(Replay, replay_id)
    if replay is None or replay.campaign_id != campaign.id:
        raise NotFound(f"No replay #{replay_id} in campaign {campaign.slug!r}.")
    return replay


def of_campaign(session: Session, campaign: Campaign) -> list[Replay]:
    """The campaign's replays, newest first."""
    return list(session.exec(select(Replay).where(Replay.campaign_id == campaign.id).order_by(col(Replay.id).desc())))


@dataclass(frozen=True)
class Summary:
    """A replay as the campaign page's list shows it: its trials and how many have ended."""

    replay: Replay
    queued: int
    ended: int


def summaries(session: Session, campaign: Campaign, limit: int = 10) -> list[Summary]:
    """The campaign's latest replays, newest first, with their trial counts (two queries, whatever the size)."""
    rows = list(
        session.exec(
            select(Replay).where(Replay.campaign_id == campaign.id).order_by(col(Replay.id).desc()).limit(limit)
        )
    )
    counts: dict[int, list[int]] = {r.id: [0, 0] for r in rows if r.id is not None}
    if counts:
        for replay_id, state in session.exec(
            select(Trial.replay_id, Trial.state).where(col(Trial.replay_id).in_(list(counts)))
        ):
            counts[replay_id][0] += 1  # type: ignore[index]
            counts[replay_id][1] += state in TERMINAL_TRIAL_STATES  # type: ignore[index]
    return [Summary(r, *counts[r.id]) for r in rows]  # type: ignore[index]


def _trials(session: Session, replay: Replay) -> list[Trial]:
    return list(session.exec(select(Trial).where(Trial.replay_id == replay.id).order_by(col(Trial.id))))


def _lock(session: Session, replay_id: int, *, skip_locked: bool = False) -> Replay | None:
    return session.exec(
        select(Replay)
        .where(Replay.id == replay_id)
        .with_for_update(skip_locked=skip_locked)
        .execution_options(populate_existing=True)
    ).first()


def cancel(session: Session, campaign: Campaign, replay_id: int, actor: str) -> list[Trial]:
    """Cancel the replay's queued trials (and nothing else: one its runner took runs on); the replay is
    cancelled. Returns the trials cancelled."""
    get(session, campaign, replay_id)
    replay = _lock(session, replay_id)
    assert replay is not None
    if replay.state != ReplayState.running:
        raise Invalid(f"replay #{replay.id} has already ended ({replay.state})", field="replay")
    cancelled = []
    for trial in _trials(session, replay):
        if trial.state != TrialState.queued or trial.runner_id is not None:
            continue
        locked = queue.lock_trial(session, trial.id)  # type: ignore[arg-type]
        if locked.state == TrialState.queued and locked.runner_id is None:
            trials.request_cancel(session, locked, actor)
            cancelled.append(locked)
    replay.state = ReplayState.cancelled
    replay.ended_at = utcnow()
    session.add(replay)
    session.flush()
    return cancelled


def advance_open(session: Session) -> list[int]:
    """Finish every running replay whose trials have all ended (replay.finished to the outbox, in this
    transaction). Returns the campaign ids whose replays finished (their pages refresh)."""
    changed = []
    for replay_id in session.exec(select(Replay.id).where(Replay.state == ReplayState.running)).all():
        replay = _lock(session, replay_id, skip_locked=True)  # type: ignore[arg-type]
        if replay is None or replay.state != ReplayState.running:
            continue
        mine = _trials(session, replay)
        if any(t.state not in TERMINAL_TRIAL_STATES for t in mine):
            continue
        replay.state = ReplayState.finished
        replay.ended_at = utcnow()
        session.add(replay)
        session.flush()
        campaign = session.get(Campaign, replay.campaign_id)
        assert campaign is not None
        notifications.replay_finished(
            session, campaign, replay, [row.sentence for row in report(session, campaign, replay).rows]
        )
        changed.append(replay.campaign_id)
    return changed


@dataclass(frozen=True)
class Point:
    """One point of the headline metric, before against after (ratio: after's median over before's)."""

    label: str
    before: float | None
    after: float | None
    ratio: float | None
    low: float | None
    high: float | None
    verdict: str | None  # a statistics.Finding value; None: not measured on both
    note: str = ""

    @property
    def finding_words(self) -> str:
        return statistics.FINDING_WORDS[statistics.Finding(self.verdict)] if self.verdict else ""

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("label", "before", "after", "ratio", "low", "high", "verdict", "note")}


@dataclass(frozen=True)
class Row:
    """One approach of the replay: before (the old stack) and after (the runner's)."""

    key: str
    title: str
    before_status: str
    before_reason: str
    before_stack: str
    before_trial_id: int | None
    retest: str
    trial_id: int | None
    trial_state: str | None
    proposed: str | None  # the status the replay trial's proposal names
    after_status: str | None  # the verdict confirmed on the replay trial (None: not yet)
    metric: str | None
    unit: str
    points: tuple[Point, ...]
    skipped: str = ""

    @property
    def changed(self) -> bool:
        return self.after_status is not None and self.after_status != self.before_status

    @property
    def sentence(self) -> str:
        if self.skipped:
            return f"{self.key}: not replayed ({self.skipped})"
        after = self.after_status or (
            f"proposed {self.proposed}" if self.proposed else f"trial {self.trial_state or 'queued'}, no verdict yet"
        )
        head = f"{self.key}: {self.before_status} -> {after}"
        measured = [p for p in self.points if p.verdict]
        if measured:
            p = measured[0]
            head += f"; {self.metric} {p.label + ' ' if p.label else ''}x{p.ratio:.3g} ({p.finding_words})"
        return head

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "title": self.title,
            "before": {
                "status": self.before_status,
                "reason": self.before_reason,
                "stack": self.before_stack,
                "trial_id": self.before_trial_id,
            },
            "after": {
                "trial_id": self.trial_id,
                "trial_state": self.trial_state,
                "proposed": self.proposed,
                "status": self.after_status,
            },
            "retest": self.retest,
            "changed": self.changed,
            "skipped": self.skipped or None,
            "metric": self.metric,
            "unit": self.unit,
            "points": [p.as_dict() for p in self.points],
        }


@dataclass(frozen=True)
class Report:
    replay: Replay
    rows: list[Row]

    @property
    def runner_stack(self) -> str:
        return _summary(self.replay.runner_fingerprint)

    @property
    def ended(self) -> int:
        return sum(1 for r in self.rows if r.trial_state in TERMINAL_TRIAL_STATES)

    @property
    def queued(self) -> int:
        return sum(1 for r in self.rows if r.trial_id is not None)

    def as_dict(self) -> dict[str, Any]:
        r = self.replay
        return {
            "id": r.id,
            "state": r.state,
            "runner_id": r.runner_id,
            "runner": r.runner_name,
            "runner_stack": self.runner_stack,
            "requested_by": r.requested_by,
            "created_at": aware(r.created_at),  # SQLite gives stored dates back naive: UTC, with its offset
            "ended_at": aware(r.ended_at),
            "trials": self.queued,
            "ended": self.ended,
            "rows": [row.as_dict() for row in self.rows],
        }


def _points(result: comparison.Comparison | None) -> tuple[str | None, str, tuple[Point, ...]]:
    group = comparison.deciding_group(result) if result is not None else None
    if group is None:
        return None, "", ()
    points = []
    for row in group.rows:
        pair = row.stats.pairs[0] if row.stats is not None else None
        s = pair.stats if pair is not None else None
        ratio = s.ratio if s is not None else None
        points.append(
            Point(
                row.label,
                row.values[0],
                row.values[1],
                ratio.value if ratio else None,
                ratio.low if ratio else None,
                ratio.high if ratio else None,
                s.verdict.value if s is not None else None,
                pair.not_compared if pair is not None else "",
            )
        )
    return group.name, group.unit, tuple(points)


def _confirmed_on(session: Session, trial_ids: list[int]) -> dict[int, str]:
    """trial id -> the status the newest status change naming the trial moved to (a verdict once confirmed)."""
    if not trial_ids:
        return {}
    out: dict[int, str] = {}
    for trial_id, to_status in session.exec(
        select(StatusChange.trial_id, StatusChange.to_status)
        .where(col(StatusChange.trial_id).in_(trial_ids), StatusChange.kind == HistoryKind.status)
        .order_by(col(StatusChange.at), col(StatusChange.id))
    ):
        if to_status in VERDICTS or to_status == ApproachStatus.untested:
            out[trial_id] = to_status  # type: ignore[index]
    return out


class _Trial(NamedTuple):
    """What the report reads of a replay trial (its columns, not an ORM object: a replay holds hundreds)."""

    id: int
    state: str
    proposal: dict[str, Any] | None


def _after(
    trial: _Trial | Trial | None, pending: int | None, confirmed: dict[int, str], entry: dict[str, Any]
) -> str | None:
    """The verdict confirmed on the replay trial (None: not yet); `pending` is its approach's pending trial
    (a trial's approach always exists: trials go with it). An imported replay's entry carries the verdict
    (`after`): the status changes that name trials do not travel in the campaign file."""
    if trial is None or trial.id is None or trial.state in (TrialState.cancelled, TrialState.lost):
        return None  # a cancelled or lost trial: the approach went back to what it was, no new verdict
    if trial.id in confirmed and pending != trial.id:
        return confirmed[trial.id]
    return entry.get("after")


def report(session: Session, campaign: Campaign, replay: Replay) -> Report:
    """Per approach of the replay (payoff order): before and after, what changed, the headline metric's statistics."""
    by_id = {
        t.id: t
        for t in map(
            _Trial._make,
            session.execute(
                sa_select(Trial.id, Trial.state, Trial.proposal).where(Trial.replay_id == replay.id)  # type: ignore[call-overload]
            ),
        )
    }
    pending: dict[int, int] = dict(
        session.execute(
            sa_select(Approach.id, Approach.pending_trial_id).where(  # type: ignore[call-overload]
                Approach.campaign_id == campaign.id, col(Approach.pending_trial_id).is_not(None)
            )
        ).all()
    )
    confirmed = _confirmed_on(session, list(by_id))
    pairs = [
        (e["trial_id"], trial.id)
        for e in replay.entries
        if not e.get("skipped")
        and e.get("trial_id")
        and (trial := by_id.get(e["replay_trial_id"])) is not None
        and trial.state == TrialState.succeeded
    ]
    compared = comparison.compare_trial_pairs(  # two queries; the deciding metric's statistics only
        session, campaign, pairs, across_stacks=True, deciding_only=True
    )
    rows = []
    for e in replay.entries:
        if e.get("skipped"):
            rows.append(
                Row(
                    e["key"],
                    e["title"],
                    e["status"],
                    "",
                    "",
                    None,
                    "",
                    None,
                    None,
                    None,
                    None,
                    None,
                    "",
                    (),
                    e["skipped"],
                )
            )
            continue
        trial = by_id.get(e["replay_trial_id"])
        after = _after(trial, pending.get(e["approach_id"]), confirmed, e)
        metric: str | None = None
        unit = ""
        points: tuple[Point, ...] = ()
        if trial is not None and trial.state == TrialState.succeeded and e.get("trial_id"):
            metric, unit, points = _points(compared.get((e["trial_id"], trial.id)))
        proposal = (trial.proposal or {}) if trial is not None else {}
        rows.append(
            Row(
                key=e["key"],
                title=e["title"],
                before_status=e["status"],
                before_reason=e.get("reason") or "",
                before_stack=e.get("stack") or "",
                before_trial_id=e.get("trial_id"),
                retest=e.get("retest") or "",
                trial_id=trial.id if trial is not None else None,
                trial_state=trial.state if trial is not None else None,
                proposed=proposal.get("status") or e.get("proposed"),
                after_status=after,
                metric=metric,
                unit=unit,
                points=points,
            )
        )
    return Report(replay, rows)


# ---- the campaign file's `replays` section (campaign_files; export --with-results) ------------------------


def _a_date(value: Any) -> Any:
    # YAML gives a datetime (unquoted) or a string; a number is not a date here (the schema: date-time).
    if value is not None and not isinstance(value, (datetime, str)):
        raise ValueError("must be a date and time, e.g. 2025-03-01T10:00:00+00:00")
    return value


class TrialRef(BaseModel):
    """A trial of the file's `results`, by the identity the results import uses: its approach (the entry's)
    and its created, started and finished dates."""

    model_config = ConfigDict(extra="forbid")
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None

    _dates = field_validator("created_at", "started_at", "finished_at", mode="before")(_a_date)

    @field_validator("created_at", "started_at", "finished_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return aware(value)


class ReplayEntryFile(BaseModel):
    """One approach of a replay: what it was before, its replay trial, and the verdict confirmed on it."""

    model_config = ConfigDict(extra="forbid")
    approach: str = Field(min_length=1, max_length=120)
    title: str = Field("", max_length=500)
    status: ApproachStatus  # before the replay
    reason: str = Field("", max_length=20000)
    stack: str = Field("", max_length=2000)
    bound: str | None = Field(None, max_length=2000)
    retest: str = Field("", max_length=20000)
    verdict_trial: TrialRef | None = None  # the trial behind the verdict before
    trial: TrialRef | None = None  # the replay's trial (ended trials only travel)
    proposed: ApproachStatus | None = None  # the status the replay trial's proposal named
    after: ApproachStatus | None = None  # the verdict confirmed on the replay trial
    skipped: str = Field("", max_length=2000)  # not replayed, and why


class ReplayFile(BaseModel):
    """A replay as the campaign file carries it (docs/planning.md, Replay)."""

    model_config = ConfigDict(extra="forbid")
    runner: str = Field(min_length=1, max_length=120)
    runner_fingerprint: dict[str, Any] | None = None
    requested_by: str = Field("", max_length=120)
    state: ReplayState
    created_at: datetime
    ended_at: datetime | None = None
    entries: list[ReplayEntryFile] = Field(default_factory=list)

    _dates = field_validator("created_at", "ended_at", mode="before")(_a_date)

    @field_validator("created_at", "ended_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return aware(value)


def _ref(trial: Trial | None) -> dict[str, Any] | None:
    if trial is None or trial.state not in TERMINAL_TRIAL_STATES:
        return None  # only ended trials are in the file's results
    ref: dict[str, Any] = {"created_at": iso_utc(trial.created_at)}
    for name in ("started_at", "finished_at"):
        if getattr(trial, name) is not None:
            ref[name] = iso_utc(getattr(trial, name))
    return ref


def _replay_mapping(
    replay: Replay, trial_of: dict[int, Trial], approaches: dict[int, Approach], confirmed: dict[int, str]
) -> dict[str, Any]:
    item: dict[str, Any] = {"runner": replay.runner_name}
    if replay.runner_fingerprint is not None:
        item["runner_fingerprint"] = replay.runner_fingerprint
    if replay.requested_by:
        item["requested_by"] = replay.requested_by
    item["state"] = replay.state
    item["created_at"] = iso_utc(replay.created_at)
    if replay.ended_at is not None:
        item["ended_at"] = iso_utc(replay.ended_at)
    entries = []
    for e in replay.entries:
        approach = approaches.get(e.get("approach_id"))  # type: ignore[arg-type]
        entry: dict[str, Any] = {"approach": approach.key if approach is not None else e["key"], "title": e["title"]}
        entry["status"] = e["status"]
        if e.get("skipped"):
            entry["skipped"] = e["skipped"]
            entries.append(entry)
            continue
        for name in ("reason", "stack", "bound", "retest"):
            if e.get(name):
                entry[name] = e[name]
        trial = trial_of.get(e.get("replay_trial_id"))  # type: ignore[arg-type]
        if (ref := _ref(trial_of.get(e.get("trial_id")))) is not None:  # type: ignore[arg-type]
            entry["verdict_trial"] = ref
        if (ref := _ref(trial)) is not None:
            entry["trial"] = ref
            proposed = (trial.proposal or {}).get("status") if trial is not None else None
            if proposed:
                entry["proposed"] = proposed
            pending = approach.pending_trial_id if approach is not None else None
            if (after := _after(trial, pending, confirmed, e)) is not None:
                entry["after"] = after
        entries.append(entry)
    item["entries"] = entries
    return item


def export_pieces(session: Session, campaign: Campaign, pieces: Dumps) -> Iterator[str]:
    """`replays:` and the campaign's replays, oldest first, their trials referenced by their results'
    identity (four queries whatever the size). Nothing when the campaign has none."""
    replays = list(session.exec(select(Replay).where(Replay.campaign_id == campaign.id).order_by(col(Replay.id))))
    if not replays:
        return
    ids = {i for r in replays for e in r.entries for i in (e.get("trial_id"), e.get("replay_trial_id")) if i}
    trial_of = {t.id: t for t in session.exec(select(Trial).where(col(Trial.id).in_(list(ids))))} if ids else {}
    approaches = {a.id: a for a in session.exec(select(Approach).where(Approach.campaign_id == campaign.id))}
    replay_trials = [e["replay_trial_id"] for r in replays for e in r.entries if e.get("replay_trial_id")]
    confirmed = _confirmed_on(session, replay_trials)
    yield "replays:\n" + "".join(
        pieces.dump([_replay_mapping(r, trial_of, approaches, confirmed)])  # type: ignore[arg-type]
        for r in replays
    )


def import_replays(session: Session, campaign: Campaign, replays: list[ReplayFile]) -> tuple[int, int]:
    """Create the file's replays in `campaign` (its approaches and results exist by now), their trials
    found by their results' identity (a reference to a trial not on the board is dropped: the entry then
    has no trial). A replay already here (same runner, same start) is not imported again. Returns
    (replays added, replays already here)."""
    approaches = {a.key: a for a in session.exec(select(Approach).where(Approach.campaign_id == campaign.id))}
    trials_at = {
        (t.approach_id, naive_utc(t.created_at), naive_utc(t.started_at), naive_utc(t.finished_at)): t
        for t in session.exec(select(Trial).where(Trial.campaign_id == campaign.id))
    }
    present = {
        (name, naive_utc(at))
        for name, at in session.exec(
            select(Replay.runner_name, Replay.created_at).where(Replay.campaign_id == campaign.id)
        )
    }

    def find(approach: Approach | None, ref: TrialRef | None) -> Trial | None:
        if approach is None or approach.id is None or ref is None:
            return None
        return trials_at.get(
            (approach.id, naive_utc(ref.created_at), naive_utc(ref.started_at), naive_utc(ref.finished_at))
        )

    added = kept = 0
    for item in replays:
        if (item.runner, naive_utc(item.created_at)) in present:
            kept += 1
            continue
        replay = Replay(
            campaign_id=campaign.id,  # type: ignore[arg-type]
            runner_id=None,
            runner_name=item.runner,
            runner_fingerprint=item.runner_fingerprint,
            state=item.state,
            requested_by=item.requested_by,
            created_at=item.created_at,
            ended_at=item.ended_at,
        )
        session.add(replay)
        session.flush()
        entries: list[dict[str, Any]] = []
        for e in item.entries:
            approach = approaches.get(e.approach)
            base = {"approach_id": approach.id if approach else None, "key": e.approach, "title": e.title}
            if e.skipped:
                entries.append({**base, "status": e.status.value, "skipped": e.skipped})
                continue
            before, mine = find(approach, e.verdict_trial), find(approach, e.trial)
            if mine is not None and mine.replay_id is None:
                mine.replay_id = replay.id
                session.add(mine)
            entry = {
                **base,
                "status": e.status.value,
                "reason": e.reason,
                "trial_id": before.id if before is not None else None,
                "stack": e.stack,
                "bound": e.bound,
                "retest": e.retest,
                "replay_trial_id": mine.id if mine is not None else None,
            }
            if e.proposed is not None:
                entry["proposed"] = e.proposed.value
            if e.after is not None:
                entry["after"] = e.after.value
            entries.append(entry)
        replay.entries = entries
        session.add(replay)
        added += 1
    session.flush()
    return added, kept
