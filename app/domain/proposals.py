"""What an ended trial proposes: its failure signature, or, on success, what its evidence supports.

A success is weighed against a reference: the campaign's baseline (the approach of
Campaign.baseline_trial_id), else the current best (the first adopted approach by priority). The two
approaches are compared over their succeeded trials on the same stack (app/domain/comparison.py) on
the deciding metric, by the campaign's rule (app/domain/statistics.py):

| evidence                                  | label          | status proposed |
|-------------------------------------------|----------------|-----------------|
| no reference to compare with              | measured       | untested        |
| faster than the baseline at every point   | promising      | promising       |
| faster than the adopted best at every pt  | adopt          | adopted         |
| slower at every point                     | slower         | dead_end        |
| anything else                             | inconclusive   | untested        |

"measured" and "inconclusive" are proposal labels, not statuses: the approach stays open (untested, so
"Run next" or a Settle can gather more), the reason says what was shown (no verdict with one trial a side,
equivalent, below the minimum effect, mixed) after how many trials a side, and an
inconclusive proposal offers "Repeat" (a Settle of the reference vs this approach, app/domain/repeats.py).
The status set (models.ApproachStatus) is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlmodel import Session, col, select

from app.domain import comparison, statistics, verdicts
from app.domain import fingerprint as stack
from app.domain.answer import is_world_figure
from app.domain.errors import Invalid
from app.domain.units import plural
from app.domain.verdicts import SIGNATURE_STATUS, SUMMARY_METRICS
from app.models import Approach, ApproachStatus, Campaign, Metric, Trial, TrialState


@dataclass
class Proposal:
    status: ApproachStatus
    reason: str
    components: list[str] = field(default_factory=list)
    cause: str = ""
    signature: str = ""
    evidence_line: str = ""
    label: str = ""  # measured | promising | adopt | slower | inconclusive (a success); "" otherwise
    settle: tuple[str, str] | None = None  # (reference key, this approach's key): offer "Repeat" (a Settle)


def _metric_summary(session: Session, trial: Trial) -> str:
    rows = list(
        session.exec(select(Metric).where(Metric.trial_id == trial.id).order_by(col(Metric.seq), col(Metric.index)))
    )
    for name in SUMMARY_METRICS:
        picked = [m for m in rows if m.name == name and is_world_figure(m.tags)]
        if picked:
            m = min(picked, key=lambda m: m.tags.get("tokens", 0) != 4)  # the verify size when there is one
            where = ", ".join(f"{k}={m.tags[k]}" for k in ("backend", "mode", "tokens", "world_size") if k in m.tags)
            return f"{name} {m.value:.4g} {m.unit}" + (f" ({where})" if where else "")
    return f"{plural(len(rows), 'metric')} recorded" if rows else "no metrics recorded"


def reference_of(session: Session, campaign: Campaign, approach: Approach) -> tuple[Approach, bool] | None:
    """(the approach a success is weighed against, whether it is the adopted best), or None."""
    if campaign.baseline_trial_id is not None:
        baseline = session.get(Trial, campaign.baseline_trial_id)
        if baseline is not None and baseline.approach_id != approach.id:
            found = session.get(Approach, baseline.approach_id)
            if found is not None:
                return found, False
    best = session.exec(
        select(Approach)
        .where(
            Approach.campaign_id == campaign.id,
            Approach.status == ApproachStatus.adopted,
            col(Approach.id) != approach.id,
        )
        .order_by(col(Approach.position), col(Approach.id))
    ).first()
    return (best, True) if best is not None else None


def propose(session: Session, trial: Trial) -> Proposal:
    """The verdict a trial suggests: its failure signature, or its measurements on success."""
    found = trial.proposal or {}
    if found.get("verdict"):
        status = SIGNATURE_STATUS.get(found["verdict"], ApproachStatus.untested)
        return Proposal(
            status=status,
            reason=found.get("reason") or found.get("cause", ""),
            components=stack.bound_components(found.get("bound_to")),
            cause=found.get("cause", ""),
            signature=found.get("signature", ""),
            evidence_line=found.get("evidence_line") or "",
        )
    if trial.state == TrialState.succeeded:
        return _success(session, trial)
    words = trial.state.replace("_", " ")
    detail = f" (exit code {trial.exit_code})" if trial.exit_code is not None else ""
    return Proposal(
        status=ApproachStatus.untested,
        reason=f"trial #{trial.id} {words}{detail} with no known failure signature: read its log",
    )


def _success(session: Session, trial: Trial) -> Proposal:
    summary = f"trial #{trial.id} succeeded: {_metric_summary(session, trial)}"
    approach = session.get(Approach, trial.approach_id)
    campaign = session.get(Campaign, trial.campaign_id)
    assert approach is not None and campaign is not None
    found = reference_of(session, campaign, approach)
    if found is None:
        return Proposal(
            ApproachStatus.untested,
            f"{summary}; measured: no baseline or adopted approach to compare with",
            label="measured",
        )
    reference, is_best = found
    result = comparison.compare_approaches(session, campaign, [reference.key, approach.key])
    group = comparison.deciding_group(result)
    settle = (reference.key, approach.key)
    if group is None:
        return Proposal(
            ApproachStatus.untested,
            f"{summary}; measured: nothing in common with {reference.title} on this stack",
            label="measured",
            settle=settle,
        )
    pairs = [(r, r.stats.pairs[0].stats) for r in group.rows if r.stats and r.stats.pairs[0].stats]
    verdicts = {p.verdict for _, p in pairs}
    trials = min((min(s.trials for s in r.stats.sides) for r, _ in pairs if r.stats), default=0)
    evidence = _evidence(group, pairs)
    if verdicts == {statistics.Finding.faster}:
        if is_best:
            return Proposal(
                ApproachStatus.adopted,
                f"{summary}; faster than {reference.title}, the adopted best: {evidence}",
                label="adopt",
            )
        return Proposal(
            ApproachStatus.promising, f"{summary}; faster than {reference.title}: {evidence}", label="promising"
        )
    if verdicts == {statistics.Finding.slower}:
        return Proposal(
            ApproachStatus.dead_end, f"{summary}; slower than {reference.title}: {evidence}", label="slower"
        )
    return Proposal(
        ApproachStatus.untested,
        f"{summary}; inconclusive: {_what_was_shown(verdicts, reference.title, trials)} ({evidence})",
        label="inconclusive",
        settle=settle,
    )


def _what_was_shown(verdicts: set[statistics.Finding], reference: str, trials: int) -> str:
    """Why no status follows: 'no verdict with 1 trial a side: repeat it', 'equivalent to X after 4 trials a
    side', 'faster at some points, slower at others than X', ..."""
    words = statistics.FINDING_WORDS
    after = f"after {plural(trials, 'trial')} a side"
    if not verdicts or verdicts == {statistics.Finding.no_verdict}:
        return f"no verdict against {reference} with {plural(trials, 'trial')} a side (its run-to-run spread is unknown): repeat"
    if verdicts == {statistics.Finding.equivalent}:
        return f"equivalent to {reference} {after} (within the campaign's minimum effect)"
    if verdicts == {statistics.Finding.below_min_effect}:
        return f"different from {reference} but below the campaign's minimum effect {after}"
    listed = ", ".join(words[v] for v in statistics.Finding if v in verdicts)
    return f"not faster at every point than {reference} {after} ({listed})"


def _evidence(group: comparison.MetricGroup, pairs: list) -> str:
    """'allreduce_latency_us x0.95 [0.93, 0.97] at tokens=4' for the first row, plus how many rows."""
    if not pairs:
        return f"{group.name}: no samples on both"
    row, pair = pairs[0]
    ratio = pair.ratio
    if ratio is None:
        text = f"{group.name}: no ratio"
    elif ratio.low is None or ratio.high is None:
        text = f"{group.name} x{ratio.value:.3f} (one trial a side: no interval)"
    else:
        text = f"{group.name} x{ratio.value:.3f} [{ratio.low:.3f}, {ratio.high:.3f}]"
    where = f" at {row.label}" if row.label else ""
    more = f", {plural(len(pairs), 'point')}" if len(pairs) > 1 else ""
    return text + where + more


def take(session: Session, trial: Trial, actor: str) -> None:
    """A person takes the trial's waiting proposal as it stands (its status, reason and binding): the
    "Take the proposal and repeat" of an inconclusive trial. Refused unless the proposal still waits."""
    approach = session.get(Approach, trial.approach_id)
    if approach is None or approach.pending_trial_id != trial.id:
        raise Invalid(f"trial #{trial.id}'s proposal no longer waits for a verdict: reload the page", field="taking")
    found = propose(session, trial)
    reason = found.reason or f"trial #{trial.id}: {found.label}"
    verdicts.confirm(session, approach, trial, found.status, reason, list(found.components), actor)
