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

from packaging.version import InvalidVersion, Version
from sqlmodel import Session, select

from app.domain import fingerprint as stack
from app.domain import verdicts
from app.domain.answer import LatencyEstimate, ProfitabilityReport, reported_latencies
from app.domain.answer.read import read_answer
from app.domain.campaigns import approaches
from app.domain.errors import Invalid, or_not_found
from app.domain.units import size_label
from app.models import Approach, ApproachStatus, Campaign, Runner, RunOrder

# approach.effort's first word -> effort points (the score divides by them). Unknown or empty: medium.
EFFORT_POINTS: dict[str, float] = {"trivial": 0.5, "low": 1.0, "medium": 2.0, "high": 4.0}
DEFAULT_EFFORT = 2.0
# Verdicts that count in the risk: reached on a trial, with a binding.
JUDGED = (ApproachStatus.dead_end, ApproachStatus.deferred, ApproachStatus.promising, ApproachStatus.adopted)


def effort_points(text: str) -> float:
    """'low (one flag)' -> 1.0; 'high (build MSCCL++)' -> 4.0; '' or unknown words -> 2.0 (medium)."""
    found = re.match(r"\s*([a-zA-Z]+)", text or "")
    return EFFORT_POINTS.get(found.group(1).lower(), DEFAULT_EFFORT) if found else DEFAULT_EFFORT


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
            f"median of {len(peers)} {kind} approach(es) measured on {where} at {size_label(verify_bytes)} "
            f"({', '.join(title for title, _ in peers[:3])}{' …' if len(peers) > 3 else ''})",
        )
    return None


def _components_of(approach: Approach) -> tuple[str, ...]:
    bound = stack.bound_components(approach.bound_to)
    if bound:
        return tuple(c for c in bound if c not in ("sm", "gpu"))
    software = (approach.requirements or {}).get("software") or []
    return tuple(c for c in stack.STACK_COMPONENTS if c in software and c not in ("sm", "gpu"))


class _Verdicts:
    """The campaign's judged, bound verdicts indexed once: (SM, component) -> approach ids (all, and died),
    so each candidate's risk is a union of a few sets, not a pass over every approach."""

    def __init__(self, rows: list[Approach]) -> None:
        self.judged: dict[tuple[str | None, str], set[int]] = {}
        self.died: dict[tuple[str | None, str], set[int]] = {}
        for a in rows:
            if a.status not in JUDGED:
                continue
            sm = stack.component_value(a.verdict_fingerprint, "sm")
            for c in stack.bound_components(a.bound_to):
                for where in (sm, None):  # None: any SM
                    self.judged.setdefault((where, c), set()).add(a.id)  # type: ignore[arg-type]
                    if a.status == ApproachStatus.dead_end:
                        self.died.setdefault((where, c), set()).add(a.id)  # type: ignore[arg-type]

    def risk(self, approach: Approach, campaign_sm: str | None) -> Risk:
        components = _components_of(approach)
        sm = stack.component_value(approach.verdict_fingerprint, "sm") or campaign_sm
        judged: set[int] = set()
        died: set[int] = set()
        for c in components:
            judged |= self.judged.get((sm, c), set())
            died |= self.died.get((sm, c), set())
        judged.discard(approach.id)
        died.discard(approach.id)
        return Risk((len(died) + 1) / (len(judged) + 2), len(died), len(judged), components, sm)


def _reasons(r: Ranked) -> tuple[str, ...]:
    n = r.needs
    out = []
    at = size_label(n.bytes)
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
    report = report if report is not None else read_answer(session, campaign).report
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
    judged = _Verdicts(rows)
    out: list[Ranked] = []
    for approach in candidates:
        expected = _expected(approach, by_key_reported, measured, kinds, needs.bytes)
        gain = max(0.0, (best[0] - expected.t_ar_us) * n_ar / 1000.0) if expected and best and n_ar else None
        effort = effort_points(approach.effort)
        risk = judged.risk(approach, campaign_sm)
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
        parts.append(f"needs <= {top.needs.us:.3g} us at {size_label(top.needs.bytes)}")
    if top.expected is not None:
        parts.append(f"expected {top.expected.t_ar_us:.3g} us ({top.expected.source})")
    else:
        parts.append("no figure known: by priority")
    parts.append(f"effort {top.approach.effort or 'not given'}")
    return "; ".join(parts)


# ---- the upgrade planner ----------------------------------------------------------------------
#
# For each stack component, the dead-end and deferred approaches bound to it, with the version each died on
# and its cause. For a target stack (typed versions, or a runner's fingerprint), what it would re-open. That
# an upgrade fixes a cause is known from data only:
#   1. a team's note on the verdict, in its reason or evidence: "needs torch >= 2.11" (NOTE_PATTERN); the
#      target re-opens it when it has that component at that version or newer;
#   2. a success (promising / adopted) of the same approach key anywhere on the board, on a stack whose bound
#      components differ from the one it died on; the target re-opens it when it is at least that stack.
# A verdict bound to a component the target changes, with neither, is left untouched, said so: a re-test
# would tell, nothing known says the upgrade fixes it. An unbound verdict (the topology's physics, a missing
# build) is untouched by any upgrade.

CLOSED = (ApproachStatus.dead_end, ApproachStatus.deferred)
SUCCEEDED = (ApproachStatus.promising, ApproachStatus.adopted)
_NAMES = {**{k: k for k in stack.STACK_COMPONENTS}, **{v.lower(): k for k, v in stack.STACK_COMPONENTS.items()}}
NOTE_PATTERN = re.compile(
    r"\b(?:needs|requires)\s+(" + "|".join(sorted(map(re.escape, _NAMES), key=len, reverse=True)) + r")"
    r"\s*(>=|>)\s*v?([0-9][0-9A-Za-z.+-]*[0-9A-Za-z])",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Note:
    """'needs torch >= 2.11' in a verdict's reason or evidence."""

    component: str
    op: str
    version: str

    def met_by(self, value: str | None) -> bool | None:
        """Whether a version satisfies it (None: the version is unknown or unreadable)."""
        have, want = _version(value), _version(self.version)
        if have is None or want is None:
            return None
        return have >= want if self.op == ">=" else have > want

    def __str__(self) -> str:
        return f"needs {stack.STACK_COMPONENTS[self.component]} {self.op} {self.version}"


# A version is short; a longer one is refused where it is typed (`parse_target`) and ignored where a runner
# reports it: packaging turns each release number into an int, and past 4,300 digits Python refuses (ValueError).
MAX_VERSION_CHARS = 64


def _version(text: str | None) -> Version | None:
    """The release part of a version ('2.10.0+cu128' -> 2.10.0): a local build tag does not order versions."""
    if not text or len(text) > MAX_VERSION_CHARS:
        return None
    try:
        return Version(Version(text).base_version)
    except (InvalidVersion, ValueError):
        return None


def verdict_notes(approach: Approach) -> list[Note]:
    """The team's notes on what would fix the verdict, from its reason and evidence."""
    found = []
    for text in (approach.reason, approach.evidence):
        for name, op, version in NOTE_PATTERN.findall(text or ""):
            note = Note(_NAMES[name.lower()], op, version.rstrip("."))
            if note not in found:
                found.append(note)
    return found


def parse_target(items: list[str]) -> dict[str, str]:
    """['torch=2.11.0', 'cuda=13.0'] -> {'torch': '2.11.0', 'cuda': '13.0'}; a bad item is an Invalid."""
    target: dict[str, str] = {}
    for item in items:
        name, sep, version = item.partition("=")
        component = _NAMES.get(name.strip().lower())
        if not sep or not version.strip():
            raise Invalid(f"target: {item!r} is not COMPONENT=VERSION (e.g. torch=2.11.0)", field="target")
        if component is None:
            raise Invalid(
                f"target: unknown stack component {name.strip()!r}; expected one of {', '.join(stack.STACK_COMPONENTS)}",
                field="target",
            )
        if len(version.strip()) > MAX_VERSION_CHARS:
            raise Invalid(
                f"target: {component}'s version is at most {MAX_VERSION_CHARS} characters, not {len(version.strip()):,}",
                field="target",
            )
        target[component] = version.strip()
    return target


@dataclass(frozen=True)
class Closed:
    """A dead-end or deferred approach as the planner sees it."""

    approach: Approach
    components: tuple[str, ...]  # bound, with any component its notes name
    notes: tuple[Note, ...]

    def died_on(self, component: str) -> str | None:
        return stack.component_value(self.approach.verdict_fingerprint, component)


@dataclass(frozen=True)
class Reopen:
    closed: Closed
    component: str  # the component whose upgrade re-opens it
    why: str  # the note or the success that says so
    ranked: Ranked | None  # its predicted payoff

    def as_dict(self) -> dict[str, Any]:
        a = self.closed.approach
        return {
            "key": a.key,
            "title": a.title,
            "status": a.status,
            "component": self.component,
            "died_on": self.closed.died_on(self.component),
            "cause": a.reason,
            "why": self.why,
            "expected": self.ranked.as_dict() if self.ranked else None,
        }


@dataclass(frozen=True)
class Untouched:
    closed: Closed
    why: str

    def as_dict(self) -> dict[str, Any]:
        a = self.closed.approach
        return {"key": a.key, "title": a.title, "status": a.status, "cause": a.reason, "why": self.why}


@dataclass(frozen=True)
class UpgradePlan:
    by_component: dict[str, list[Closed]]  # component -> the closed approaches bound to it (display order)
    target: dict[str, str]  # component -> version; {} without a target
    changes: list[tuple[str, str | None, str]]  # (component, from, to): how the target differs
    reopens: list[Reopen]
    untouched: list[Untouched]

    def as_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "changes": [{"component": c, "from": old, "to": new} for c, old, new in self.changes],
            "components": [
                {
                    "component": c,
                    "name": stack.STACK_COMPONENTS[c],
                    "approaches": [
                        {
                            "key": x.approach.key,
                            "status": x.approach.status,
                            "died_on": x.died_on(c),
                            "cause": x.approach.reason,
                            "notes": [str(n) for n in x.notes],
                        }
                        for x in rows
                    ],
                }
                for c, rows in self.by_component.items()
            ],
            "reopens": [r.as_dict() for r in self.reopens],
            "untouched": [u.as_dict() for u in self.untouched],
        }


def _closed(rows: list[Approach]) -> list[Closed]:
    out = []
    for a in rows:
        if a.status not in CLOSED:
            continue
        notes = tuple(verdict_notes(a))
        named = set(stack.bound_components(a.bound_to)) | {n.component for n in notes}
        out.append(Closed(a, tuple(c for c in stack.STACK_COMPONENTS if c in named), notes))
    return out


def _successes(session: Session, closed: list[Closed]) -> dict[str, list[Approach]]:
    """key -> successes of an approach of that key anywhere on the board (one query)."""
    keys = sorted({c.approach.key for c in closed if c.components})
    if not keys:
        return {}
    found: dict[str, list[Approach]] = {}
    query = select(Approach).where(Approach.key.in_(keys), Approach.status.in_(SUCCEEDED))  # type: ignore[attr-defined]
    for a in session.exec(query):
        found.setdefault(a.key, []).append(a)
    return found


def _target_value(target: dict[str, str], closed: Closed, component: str) -> str | None:
    """The target's version of a component; a component a typed target leaves out stays as it died on."""
    return target.get(component, closed.died_on(component))


def _names(components: list[str] | tuple[str, ...]) -> str:
    return ", ".join(stack.STACK_COMPONENTS[c] for c in components)


def _judge(closed: Closed, target: dict[str, str], successes: list[Approach]) -> tuple[str, str] | str:
    """(component, why) when the target re-opens it, else the reason it stays closed."""
    a = closed.approach
    if not closed.components:
        return "not bound to any stack component (" + (a.reason or a.status) + "): no upgrade changes it"
    changed = [c for c in closed.components if _target_value(target, closed, c) != closed.died_on(c)]
    for note in closed.notes:
        have = _target_value(target, closed, note.component)
        if note.met_by(have):
            return note.component, f"the team's note: {note}; the target has {have}"
    for ok in successes:
        differs = [
            c
            for c in closed.components
            if stack.component_value(ok.verdict_fingerprint, c) not in (None, closed.died_on(c))
        ]
        if differs and all(
            (_version(_target_value(target, closed, c)) or Version("0"))
            >= (_version(stack.component_value(ok.verdict_fingerprint, c)) or Version("0"))
            for c in differs
        ):
            where = stack.describe_binding({"components": differs}, ok.verdict_fingerprint)
            return differs[0], f"{ok.title} succeeded on {where} ({ok.status}, campaign #{ok.campaign_id})"
    unmet = [
        f"{n}, the target has {_target_value(target, closed, n.component) or 'no ' + stack.STACK_COMPONENTS[n.component]}"
        for n in closed.notes
    ]
    if unmet:
        return "; ".join(unmet)
    if not changed:
        return f"bound to {_names(closed.components)}, which the target does not change"
    return (
        f"bound to {_names(changed)}, which the target changes, but no note or success says the upgrade fixes "
        "its cause: a re-test would tell"
    )


def runner_target(runner: Runner) -> dict[str, str]:
    """A runner's stack as a target: each component its fingerprint reports."""
    found = {c: stack.component_value(runner.fingerprint, c) for c in stack.STACK_COMPONENTS}
    return {c: v for c, v in found.items() if v is not None}


def target_of(session: Session, items: list[str], runner_id: int | None) -> dict[str, str]:
    """The target stack a request names: typed COMPONENT=VERSION items, or a runner's fingerprint (not both)."""
    if items and runner_id is not None:
        raise Invalid("target: give versions or a runner, not both", field="target")
    if runner_id is None:
        return parse_target(items)
    runner = or_not_found(session.get(Runner, runner_id), f"no runner #{runner_id}")
    if not runner.fingerprint:
        raise Invalid(f"runner {runner.name} has not reported its stack yet", field="runner")
    return runner_target(runner)


def upgrade_plan(session: Session, campaign: Campaign, target: dict[str, str] | None = None) -> UpgradePlan:
    """What the campaign's closed verdicts depend on, and what `target` (component -> version) re-opens."""
    rows = approaches(session, campaign)
    closed = _closed(rows)
    by_component = {c: [x for x in closed if c in x.components] for c in stack.STACK_COMPONENTS}
    by_component = {c: xs for c, xs in by_component.items() if xs}
    if not target:
        return UpgradePlan(by_component, {}, [], [], [])
    base = next((a.verdict_fingerprint for a in rows if a.verdict_fingerprint), None)
    changes = [(c, stack.component_value(base, c), v) for c, v in target.items() if stack.component_value(base, c) != v]
    successes = _successes(session, closed)
    opened: list[tuple[Closed, str, str]] = []
    untouched: list[Untouched] = []
    for x in closed:
        found = _judge(x, target, successes.get(x.approach.key, []))
        if isinstance(found, tuple):
            opened.append((x, *found))
        else:
            untouched.append(Untouched(x, found))
    ranked: dict[str, Ranked] = {}
    if opened:
        report = read_answer(session, campaign).report
        reopened = [x.approach for x, _, _ in opened]
        ranked = {r.key: r for r in payoff_ranking(session, campaign, reopened, {}, report=report, rows=rows)}
    reopens = [Reopen(x, c, why, ranked.get(x.approach.key)) for x, c, why in opened]
    reopens.sort(key=lambda r: (r.ranked is None or r.ranked.score is None, -((r.ranked and r.ranked.score) or 0.0)))
    return UpgradePlan(by_component, dict(target), changes, reopens, untouched)
