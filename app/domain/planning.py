"""Planning the campaign: what to try next (the payoff ranking) and what a stack upgrade would re-open.

The payoff ranking (docs/planning.md works one through by hand). For each candidate "Run next" could start
(app/domain/scheduling.candidates: untested, or flagged for re-test), at the verify message size
(tokens x hidden x 2 bytes):

    needs     the allreduce latency to beat the campaign's current best (the best usable measured approach,
              else the baseline's reported figure), and t_ar* = (tau x T_base - T_draft - T_verify_compute)
              / N_ar, the latency at which speculation pays at the known accept length (an upper bound on
              t_ar* while a cost is unknown and counted as 0: "at most").
    expected  what is known of its latency, first that exists: a figure reported for it (campaign.reported),
              its own measurement here on another stack (a re-test), the median of the approaches of its kind
              (same recipe kind, same GPU count) measured in this campaign; with the source.
    gain      (current best - expected) x N_ar / 1000: milliseconds saved per verify step (0 if slower).
    effort    approach.effort's first word: low 1, medium 2, high 4 (EFFORT_POINTS); anything else 2.
    risk      (died + 1) / (judged + 2), Laplace's rule of succession over the campaign's verdicts bound to a
              component the candidate depends on (its binding, else its required software) on its SM.
    score     gain x (1 - risk) / effort. No expected figure (or no current best): no score.

Ranked by score, highest first; candidates without a score follow, and equal scores keep the priority
order a person set, so a campaign with no figures ranks exactly by priority. Pure functions over rows
already read: `payoff_ranking` reads the campaign in a fixed number of queries, whatever its size.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from sqlmodel import Session

from app.domain import fingerprint as stack
from app.domain import verdicts
from app.domain.inventory import approaches
from app.domain.profitability import (
    LatencyEstimate,
    ProfitabilityReport,
    profitability_report,
    reported_latencies,
)
from app.models import Approach, ApproachStatus, Campaign, RunOrder

# approach.effort's first word -> effort points (the score divides by them). Unknown or empty: medium.
EFFORT_POINTS: dict[str, float] = {"trivial": 0.5, "low": 1.0, "medium": 2.0, "high": 4.0}
DEFAULT_EFFORT = 2.0
# Verdicts that count in the risk: reached on a trial, with a binding.
JUDGED = (ApproachStatus.dead_end, ApproachStatus.deferred, ApproachStatus.promising, ApproachStatus.adopted)


def effort_points(text: str) -> float:
    """'low (one flag)' -> 1.0; 'high (build MSCCL++)' -> 4.0; '' or unknown words -> 2.0 (medium)."""
    found = re.match(r"\s*([a-zA-Z]+)", text or "")
    return EFFORT_POINTS.get(found.group(1).lower(), DEFAULT_EFFORT) if found else DEFAULT_EFFORT


def _size(nbytes: int) -> str:
    return f"{nbytes / 1024:g} KiB" if nbytes % 1024 == 0 else f"{nbytes} B"


@dataclass(frozen=True)
class Needs:
    """The latency a candidate must reach at the verify message size."""

    bytes: int
    beat_best_us: float | None  # below the campaign's current best
    beat_best_of: str  # what that best is
    pay_us: float | None  # t_ar*: speculation pays below it (None: accept length unknown)
    pay_exact: bool  # False: an upper bound (a cost unknown, counted as 0)
    tau: float | None

    @property
    def us(self) -> float | None:
        """The stricter of the two known thresholds."""
        known = [v for v in (self.beat_best_us, self.pay_us) if v is not None]
        return min(known) if known else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "bytes": self.bytes,
            "us": self.us,
            "beat_best_us": self.beat_best_us,
            "beat_best_of": self.beat_best_of,
            "pay_us": self.pay_us,
            "pay_exact": self.pay_exact,
            "tau": self.tau,
        }


@dataclass(frozen=True)
class Expected:
    t_ar_us: float
    source: str  # reported | measured on another stack | its kind
    note: str

    def as_dict(self) -> dict[str, Any]:
        return {"t_ar_us": self.t_ar_us, "source": self.source, "note": self.note}


@dataclass(frozen=True)
class Risk:
    value: float
    died: int
    judged: int
    components: tuple[str, ...]
    sm: str | None


@dataclass(frozen=True)
class Ranked:
    """One candidate with every term of its score."""

    approach: Approach
    retest: str | None  # the re-test flag, when it is a re-test candidate
    needs: Needs
    expected: Expected | None
    gain_ms: float | None
    effort: float
    risk: Risk
    score: float | None
    reasons: tuple[str, ...] = field(default=())

    @property
    def key(self) -> str:
        return self.approach.key

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "title": self.approach.title,
            "score": self.score,
            "needs": self.needs.as_dict(),
            "expected": self.expected.as_dict() if self.expected else None,
            "gain_ms": self.gain_ms,
            "effort": self.effort,
            "risk": self.risk.value,
            "retest": self.retest,
            "reasons": list(self.reasons),
        }


def _current_best(report: ProfitabilityReport) -> tuple[float, str] | None:
    best = report.best
    if best is not None:
        return best.latency.t_ar_us, f"{best.title} (measured, {best.latency.t_ar_us:.3g} us)"
    base = report.baseline_reference
    if base is not None:
        return base.latency.t_ar_us, f"{base.label} ({base.latency.t_ar_us:.3g} us)"
    return None


def _needs(report: ProfitabilityReport) -> Needs:
    inputs = report.inputs
    best = _current_best(report)
    curve, tau = report.curve, inputs.accept_length.value
    pay: float | None = None
    if curve is not None and tau is not None and curve.n_ar > 0:
        pay = (tau * curve.t_base_ms - curve.fixed_ms) / curve.n_ar * 1000.0
    return Needs(
        bytes=inputs.verify_bytes,
        beat_best_us=best[0] if best else None,
        beat_best_of=best[1] if best else "",
        pay_us=pay,
        pay_exact=curve is not None and not curve.lower_bound,
        tau=tau,
    )


def _kind(approach: Approach) -> tuple[str, Any]:
    recipe = approach.recipe if isinstance(approach.recipe, dict) else {}
    return str(recipe.get("kind") or ""), (approach.requirements or {}).get("gpus")


def _expected(
    approach: Approach,
    reported: dict[str, LatencyEstimate],
    measured: dict[int, LatencyEstimate],
    kinds: dict[tuple[str, Any], list[tuple[str, float]]],
    verify_bytes: int,
) -> Expected | None:
    if approach.key in reported:
        found = reported[approach.key]
        return Expected(found.t_ar_us, "reported", found.note)
    own = measured.get(approach.id)  # type: ignore[arg-type]
    if own is not None:
        stack_of = stack.describe_binding(approach.bound_to, approach.verdict_fingerprint) or "its earlier stack"
        return Expected(own.t_ar_us, "measured on another stack", f"measured here on {stack_of}: {own.note}")
    kind, gpus = _kind(approach)
    peers = [(title, v) for title, v in kinds.get((kind, gpus), []) if title != approach.title]
    if kind and peers:
        median = statistics.median(v for _, v in peers)
        where = f"{gpus} GPUs" if gpus else "this campaign's nodes"
        return Expected(
            median,
            "its kind",
            f"median of {len(peers)} {kind} approach(es) measured on {where} at {_size(verify_bytes)} "
            f"({', '.join(title for title, _ in peers[:3])}{' …' if len(peers) > 3 else ''})",
        )
    return None


def _components_of(approach: Approach) -> tuple[str, ...]:
    bound = stack.bound_components(approach.bound_to)
    if bound:
        return tuple(c for c in bound if c not in ("sm", "gpu"))
    software = (approach.requirements or {}).get("software") or []
    return tuple(c for c in stack.STACK_COMPONENTS if c in software and c not in ("sm", "gpu"))


def _risk(approach: Approach, rows: list[Approach], campaign_sm: str | None) -> Risk:
    components = _components_of(approach)
    sm = stack.component_value(approach.verdict_fingerprint, "sm") or campaign_sm
    died = judged = 0
    for other in rows:
        if other.id == approach.id or other.status not in JUDGED:
            continue
        bound = set(stack.bound_components(other.bound_to))
        if not bound & set(components):
            continue
        if sm is not None and stack.component_value(other.verdict_fingerprint, "sm") != sm:
            continue
        judged += 1
        died += other.status == ApproachStatus.dead_end
    return Risk((died + 1) / (judged + 2), died, judged, components, sm)


def _reasons(r: Ranked) -> tuple[str, ...]:
    n = r.needs
    out = []
    at = _size(n.bytes)
    if n.beat_best_us is not None:
        out.append(f"needs <= {n.beat_best_us:.3g} us at {at} to beat {n.beat_best_of}")
    if n.pay_us is not None:
        bound = "" if n.pay_exact else " (at most: a cost is not known yet, counted as 0)"
        if n.pay_us <= 0:
            out.append(f"speculation cannot pay at tau = {n.tau:g} whatever the allreduce{bound}")
        else:
            out.append(f"needs <= {n.pay_us:.3g} us at {at} for speculation to pay at tau = {n.tau:g}{bound}")
    else:
        out.append("the accept length is not known: the break-even latency t_ar* waits for it")
    if r.expected is not None:
        out.append(f"expected {r.expected.t_ar_us:.3g} us ({r.expected.source}): {r.expected.note}")
    else:
        out.append("no figure known for it yet: ranked by priority")
    if r.gain_ms is not None:
        out.append(f"gain {r.gain_ms:.3g} ms per verify step against the current best")
    out.append(f"effort {r.approach.effort or 'not given'} ({r.effort:g})")
    where = f" on SM {r.risk.sm}" if r.risk.sm else ""
    comps = ", ".join(stack.STACK_COMPONENTS[c] for c in r.risk.components) or "no component"
    out.append(
        f"risk {r.risk.value:.0%}: {r.risk.died} of {r.risk.judged} verdicts bound to {comps}{where} died "
        f"(({r.risk.died} + 1) / ({r.risk.judged} + 2))"
    )
    if r.retest:
        out.append(r.retest)
    return tuple(out)


def payoff_ranking(
    session: Session,
    campaign: Campaign,
    candidates: list[Approach],
    retest: dict[int, str] | None = None,
    *,
    report: ProfitabilityReport | None = None,
    rows: list[Approach] | None = None,
) -> list[Ranked]:
    """The candidates ranked by expected gain per effort (module docstring), best first. `candidates` in
    priority order (scheduling.candidates); `retest`: their re-test flags (verdicts.retest_flags)."""
    rows = rows if rows is not None else approaches(session, campaign)
    report = report if report is not None else profitability_report(session, campaign, approach_rows=rows)
    retest = retest if retest is not None else verdicts.retest_flags(session, campaign)
    needs = _needs(report)
    best = _current_best(report)
    by_key_reported: dict[str, LatencyEstimate] = {}
    for figure, estimate in reported_latencies(campaign, report.inputs):
        key = figure.get("approach")
        if key and not figure.get("baseline"):
            by_key_reported.setdefault(key, estimate)
    measured = report.latencies
    by_id = {a.id: a for a in rows}
    kinds: dict[tuple[str, Any], list[tuple[str, float]]] = {}
    for point in report.points:
        owner = by_id.get(point.approach_id)
        if owner is not None:
            kinds.setdefault(_kind(owner), []).append((owner.title, point.latency.t_ar_us))
    sms = Counter(v for a in rows if (v := stack.component_value(a.verdict_fingerprint, "sm")))
    campaign_sm = sms.most_common(1)[0][0] if sms else None
    n_ar = report.inputs.allreduces_per_verify.value or 0
    out: list[Ranked] = []
    for approach in candidates:
        expected = _expected(approach, by_key_reported, measured, kinds, needs.bytes)
        gain = max(0.0, (best[0] - expected.t_ar_us) * n_ar / 1000.0) if expected and best and n_ar else None
        effort = effort_points(approach.effort)
        risk = _risk(approach, rows, campaign_sm)
        score = gain * (1.0 - risk.value) / effort if gain is not None else None
        ranked = Ranked(approach, retest.get(approach.id), needs, expected, gain, effort, risk, score)  # type: ignore[arg-type]
        out.append(replace(ranked, reasons=_reasons(ranked)))
    # Stable sort: equal scores (and every unscored candidate) keep the priority order they came in.
    return sorted(out, key=lambda r: (r.score is None, -(r.score or 0.0)))


def run_next_order(session: Session, campaign: Campaign, queue: list[Approach]) -> list[Approach]:
    """The order "Run next candidate" tries the candidates in: the ranking, unless a person pinned the
    priority order (campaign.run_order)."""
    if campaign.run_order == RunOrder.priority or len(queue) < 2:
        return queue
    return [r.approach for r in payoff_ranking(session, campaign, queue)]


def why_next(ranked: list[Ranked]) -> str:
    """One line for the campaign page: 'needs <= 8.2 us at 56 KiB; FlashInfer reports 5.3 us; effort low'."""
    if not ranked:
        return ""
    top = ranked[0]
    parts = []
    if top.needs.us is not None:
        parts.append(f"needs <= {top.needs.us:.3g} us at {_size(top.needs.bytes)}")
    if top.expected is not None:
        parts.append(f"expected {top.expected.t_ar_us:.3g} us ({top.expected.source})")
    else:
        parts.append("no figure known: by priority")
    parts.append(f"effort {top.approach.effort or 'not given'}")
    return "; ".join(parts)
