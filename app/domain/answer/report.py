"""The profitability report: every approach placed against the break-even curve, and the answers it gives.

The report is the answer's grid at batch 1 (read.py passes the grid's batch-1 inputs and each approach's cell):
an approach with a cell there shows the cell's figures (tau*, speedup, savings, communication, break-even t_ar,
profitable); an approach without one says why it is not on the grid and shows no speedup, unless its t_ar was
measured in the serving step itself (BATCH_1_METHODS); that figure and a reported allreduce figure are answered
by the same formula (model.py) with the grid's batch-1 inputs. A t_ar off the grid is never paired with a T_base
measured on another stack (PAIRED_STACK): it is listed in `other_stack` instead. A verify step at world size 1
runs no allreduce: where the report holds nothing else, its N_ar is 0, as the cells' is (`_allreduces_measured`),
so no curve over t_ar nor break-even t_ar claims the campaign's default 122 allreduces; the cells still answer.

`profitability_report` reads the campaign's metrics once (metrics.py) and works in Python.
No FastAPI here: routes call `profitability_report` and render what it returns.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, replace

from sqlalchemy import select as sa_select
from sqlmodel import Session, col

from app.domain.answer import model as formula
from app.domain.answer.grid import WORLD_1, Cell, Interval
from app.domain.answer.inputs import (
    Input,
    Missing,
    ModelInputs,
    WhatIf,
    _first_by_preference,
    _from_metric,
    batch_1_missing,
    model_inputs,
)
from app.domain.answer.latency import LatencyEstimate, ReferencePoint, approach_latency, reported_latencies
from app.domain.answer.metrics import CampaignMetrics, load_campaign_metrics
from app.domain.answer.model import BYTES_PER_ELEMENT, BreakEvenCurve, CycleCosts
from app.domain.answer.series import stack_summary
from app.domain.answer.values import Conditions
from app.domain.campaigns import approaches
from app.domain.units import size_label
from app.models import Approach, ApproachStatus, Campaign, Trial
from app.protocol.metrics import MetricName


@dataclass(frozen=True)
class ApproachPoint:
    """One approach at its measured t_ar."""

    approach_id: int
    key: str
    title: str
    status: str
    reason: str
    stack: str
    latency: LatencyEstimate
    tau_star: float | None  # on the break-even curve (a lower bound while the curve is one)
    tau: float | None  # on the grid its cell's; off it its own accept length, else the campaign's, else None
    tau_source: str
    comm_ms: float
    savings_ms: float | None  # None while the full costs are unknown, or off the grid
    speedup: float | None
    cell: Cell | None = None  # the answer's grid cell at batch 1 and the draft steps: every figure above is its
    grid_note: str = ""  # off the grid: why (the grid's own note); tau* is then the chart's point only

    @property
    def speedup_interval(self) -> Interval | None:
        return self.cell.speedup if self.cell is not None else None

    @property
    def tau_star_interval(self) -> Interval | None:
        return self.cell.tau_star if self.cell is not None else None

    @property
    def profitable(self) -> bool | None:
        if self.cell is not None:
            return self.cell.profitable
        return None if self.savings_ms is None else bool(formula.profitable(self.comm_ms, self.savings_ms))

    @property
    def break_even_t_ar_us(self) -> float | None:
        """t_ar* of its cell (None off the grid, at world size 1, or without an accept length)."""
        return self.cell.break_even_t_ar_us if self.cell is not None else None

    @property
    def break_even_tau(self) -> float | None:
        return self.tau_star

    @property
    def world_1(self) -> bool:
        """A verify step at world size 1, placed at its grid cell: t_ar 0 because no allreduce runs."""
        return self.latency.method == WORLD_1_METHOD


@dataclass(frozen=True)
class CpuFloor:
    """A CPU or scaled-down figure of an approach: shown, never fed to the model."""

    title: str
    name: str
    value: float
    unit: str
    trial_id: int


@dataclass(frozen=True)
class ApproachBreakEven:
    """Does speculation pay with one allreduce (a measured approach or a figure reported elsewhere)?

    Decided whenever the inputs allow it: with every cost known, tau against the full tau*; while the draft
    cost or the verify compute is unknown (counted as 0, so tau* is a lower bound) only "no" is certain."""

    label: str
    approach_key: str | None
    status: str | None  # the approach's status; None for a figure of no approach (the baseline's own)
    latency: LatencyEstimate
    measured: bool  # an approach of this campaign measured here (else a figure reported elsewhere)
    baseline: bool  # the baseline's own reported figure: the state the campaign is in today
    tau: float | None  # the approach's own accept length, else the campaign's (stored or what-if)
    tau_source: str
    tau_star: float
    contains: str  # what tau* counts (BreakEvenCurve.contains)
    exact: bool  # tau* is the full break-even, not a lower bound
    t_base_ms: float
    cell: Cell | None = None  # a measured approach on the grid: its batch-1 cell, which answers for it
    grid_note: str = ""  # a measured approach off the grid: why (no speedup is computed for it elsewhere)
    formula_speedup: float | None = None  # a reported figure's S (model.py), with every cost known

    @property
    def t_ar_us(self) -> float:
        return self.latency.t_ar_us

    @property
    def world_1(self) -> bool:
        """Its verify step ran at world size 1: no allreduce, so its t_ar of 0 is no latency to quote."""
        return self.cell is not None and self.cell.note == WORLD_1

    @property
    def profitable(self) -> bool | None:
        """S > 1 iff tau > tau*; None while the accept length, or (above a lower bound) a cost, is unknown, and for
        a measured approach off the grid. On the grid, the cell's."""
        if self.cell is not None:
            return self.cell.profitable
        if self.tau is None or self.grid_note:
            return None
        if self.tau <= self.tau_star:
            return False
        return True if self.exact else None

    @property
    def margin(self) -> float | None:
        """tau - tau*: how far the accept length is above (+) or below (-) the break-even."""
        return None if self.tau is None else self.tau - self.tau_star

    @property
    def margin_ms(self) -> float | None:
        """Savings - communication per cycle, (tau - tau*) x T_base; only with every cost known."""
        cell = self.cell
        if cell is not None:
            comm, savings = cell.comm_ms, cell.savings_ms
            return savings - comm if comm is not None and savings is not None else None
        return self.margin * self.t_base_ms if self.margin is not None and self.exact else None

    @property
    def speedup(self) -> float | None:
        """S = tau x T_base / cycle time (model.speedup); only with every cost known. On the grid, the cell's."""
        if self.cell is not None:
            return self.cell.speedup.value if self.cell.speedup is not None else None
        return self.formula_speedup if self.tau is not None and self.exact and not self.grid_note else None

    @property
    def usable(self) -> bool:
        return self.status != ApproachStatus.dead_end


def _verdict(
    curve: BreakEvenCurve | None,
    label: str,
    key: str | None,
    status: str | None,
    latency: LatencyEstimate,
    measured: bool,
    baseline: bool,
    tau: float | None,
    tau_source: str,
    tau_star: float | None = None,
    cell: Cell | None = None,
    grid_note: str = "",
) -> ApproachBreakEven | None:
    """One approach or reported figure answered (answers_for): by its grid cell where it has one with a tau*, else
    by the curve at its t_ar; None without either."""
    on_grid = cell is not None and cell.tau_star is not None
    if curve is not None:
        t_base_ms = curve.t_base_ms
        tau_star = tau_star if tau_star is not None else curve.tau_star(latency.t_ar_us)
    elif cell is not None and cell.tau_star is not None and cell.t_base_ms is not None:
        t_base_ms, tau_star = cell.t_base_ms, cell.tau_star.value
    else:
        return None
    exact = on_grid or (curve is not None and not curve.lower_bound)
    return ApproachBreakEven(
        label=label,
        approach_key=key,
        status=status,
        latency=latency,
        measured=measured,
        baseline=baseline,
        tau=tau,
        tau_source=tau_source,
        tau_star=tau_star,
        contains="the full break-even" if on_grid or curve is None else curve.contains,
        exact=exact,
        t_base_ms=t_base_ms,
        cell=cell if on_grid else None,
        grid_note=grid_note,
        formula_speedup=(
            curve.speedup(tau, latency.t_ar_us)
            if curve is not None and tau is not None and not curve.lower_bound
            else None
        ),
    )


def answers_for(
    curve: BreakEvenCurve | None,
    points: Iterable[ApproachPoint],
    references: Iterable[ReferencePoint],
    accept: Input,
    statuses: dict[str, str],
) -> tuple[ApproachBreakEven, ...]:
    """Every measured approach and reported figure answered against the break-even curve, lowest tau* first.
    A measured approach on the grid is answered by its batch-1 cell; one off the grid says why and is not decided;
    a reported figure is answered by the formula (model.py) with the campaign's (the grid's batch-1) inputs and
    accept length. Without the curve (no T_base, or no allreduce in the verify step: world size 1) only the
    approaches on the grid are answered: their cells hold every figure, the rest need the curve's tau*."""

    # A measured point on the grid answers with its cell (the grid's figures at batch 1).
    found = [
        _verdict(
            curve,
            p.title,
            p.key,
            p.status,
            p.latency,
            True,
            False,
            p.tau,
            p.tau_source,
            p.tau_star if p.cell else None,
            p.cell,
            p.grid_note,
        )
        for p in points
    ]
    found += [
        _verdict(
            curve,
            r.label,
            r.approach_key,
            statuses.get(r.approach_key or ""),
            r.latency,
            False,
            r.baseline,
            accept.value,
            accept.source,
        )
        for r in references
    ]
    return tuple(sorted((a for a in found if a is not None), key=lambda a: a.tau_star))


@dataclass(frozen=True)
class ProfitabilityReport:
    inputs: ModelInputs
    curve: BreakEvenCurve | None
    costs: CycleCosts | None
    points: tuple[ApproachPoint, ...]
    references: tuple[ReferencePoint, ...]
    cpu_floor: tuple[CpuFloor, ...]
    unmeasured: tuple[str, ...]  # titles of allreduce candidates (measures_allreduce) without a t_ar at the verify size
    speculative: bool  # does the campaign ask the speculation question (see asks_speculation)
    answers: tuple[ApproachBreakEven, ...] = ()  # every approach and reported figure, lowest tau* first
    # Approaches whose t_ar was measured on another stack than the plain decode step: (title, the difference).
    # Never combined with it (issue 33 item 2): their point would pair two machines' figures.
    other_stack: tuple[tuple[str, str], ...] = ()

    @property
    def world_1(self) -> bool:
        """Every point is a verify step at world size 1 and N_ar is 0 (`_allreduces_measured`): no allreduce was
        measured because none runs, so there is no curve over t_ar and no break-even allreduce latency."""
        return (
            self.inputs.allreduces_per_verify.value == 0 and bool(self.points) and all(p.world_1 for p in self.points)
        )

    @property
    def on_t_ar_axis(self) -> tuple[ApproachPoint, ...]:
        """The points with an allreduce latency: a verify step at world size 1 runs none (t_ar 0) and has no
        place on a t_ar axis; it is still a point of the report (its grid cell at batch 1)."""
        return tuple(p for p in self.points if p.latency.t_ar_us > 0)

    @property
    def headline(self) -> ApproachBreakEven | None:
        """The answer to "does speculation pay now?": a measured usable approach that pays, else today's state
        (the baseline's reported figure), else the best usable measured approach, else the lowest tau*."""
        measured = {a.approach_key: a for a in self.answers if a.measured}
        if self.profitable_now is not None:
            return measured.get(self.profitable_now.key)
        baseline = next((a for a in self.answers if a.baseline), None)
        if baseline is not None:
            return baseline
        if self.best is not None:
            return measured.get(self.best.key)
        return next((a for a in self.answers if a.usable), next(iter(self.answers), None))

    def answer_of(self, item: ApproachPoint | ReferencePoint) -> ApproachBreakEven | None:
        """The answer for one row of the points or the reported table."""
        if isinstance(item, ApproachPoint):
            return self._answers_by_key[0].get(item.key)
        return self._answers_by_key[1].get(item.label)

    @functools.cached_property
    def _answers_by_key(self) -> tuple[dict[str, ApproachBreakEven], dict[str, ApproachBreakEven]]:
        """(measured answers by approach key, reported ones by label), the first of each: a page asks once
        per row (500 rows: one scan each was quadratic)."""
        measured: dict[str, ApproachBreakEven] = {}
        reported: dict[str, ApproachBreakEven] = {}
        for a in self.answers:
            if a.measured:
                measured.setdefault(a.approach_key or "", a)
            else:
                reported.setdefault(a.label, a)
        return measured, reported

    @property
    def others(self) -> tuple[ApproachBreakEven, ...]:
        """The answers other than the headline, lowest tau* first: where each approach would move it."""
        head = self.headline
        return tuple(a for a in self.answers if a is not head)

    @property
    def missing(self) -> tuple[Missing, ...]:
        return self.inputs.missing

    @property
    def latencies(self) -> dict[int, LatencyEstimate]:
        return {p.approach_id: p.latency for p in self.points}

    @property
    def best(self) -> ApproachPoint | None:
        """The fastest usable approach (dead ends excluded: they cannot be deployed)."""
        usable = [p for p in self.points if p.status != ApproachStatus.dead_end]
        if not usable:
            return None
        if all(p.speedup is not None for p in usable):
            return max(usable, key=lambda p: p.speedup or 0.0)
        return min(usable, key=lambda p: p.latency.t_ar_us)

    @property
    def profitable_now(self) -> ApproachPoint | None:
        best = self.best
        return best if best is not None and best.profitable else None

    @property
    def fastest(self) -> ApproachPoint | None:
        """The approach with the lowest measured t_ar, dead ends included (a latency comparison)."""
        return min(self.on_t_ar_axis, key=lambda p: p.latency.t_ar_us, default=None)

    @property
    def baseline_reference(self) -> ReferencePoint | None:
        return next((r for r in self.references if r.baseline), None)

    @property
    def best_reference(self) -> ReferencePoint | None:
        """The reported figure with the lowest tau* (a results campaign imported from a node reports its
        measurements this way, before any trial of its own)."""
        return min(
            (r for r in self.references if r.tau_star is not None), key=lambda r: r.tau_star or 0.0, default=None
        )

    @property
    def communication_only_tau(self) -> tuple[float, float] | None:
        """(tau*, t_ar us) with zero draft and verify compute at the best known t_ar: a lower bound on the
        acceptance speculation needs, known from T_base and one allreduce figure alone."""
        if self.curve is None:
            return None
        t_ars = [p.latency.t_ar_us for p in self.on_t_ar_axis] or [r.latency.t_ar_us for r in self.references]
        if not t_ars:
            return None
        t_ar = min(t_ars)
        return self.curve.n_ar * t_ar / 1000.0 / self.curve.t_base_ms, t_ar


NOT_ON_GRID = "not on the answer's grid at batch 1"
# t_ar figures measured in the serving step itself, which the grid (allreduce curves by message size) does not hold.
BATCH_1_METHODS = ("in situ", "trace", "derived")


def _grid_tau_source(inputs: ModelInputs, cell: Cell) -> str:
    """Where a cell's accept length comes from: the grid's batch-1 input (read.at_batch_1 lays it over)."""
    if cell.tau is None:
        return "not known"
    return inputs.accept_length.source if inputs.accept_length.value == cell.tau else "the answer's accept length"


def asks_speculation(campaign: Campaign, approaches: list[Approach], inputs: ModelInputs) -> bool:
    """Whether the campaign is about speculation: an accept length or draft cost is known, or an approach's
    recipe speculates. An allreduce shootout with none of these gets a latency comparison instead."""
    if inputs.accept_length.value is not None or inputs.draft_step_ms.value is not None:
        return True
    for a in approaches:
        params = (a.recipe or {}).get("params") if isinstance(a.recipe, dict) else None
        if isinstance(params, dict) and params.get("speculative"):
            return True
    return False


# What "the same stack" means for pairing a t_ar with the plain decode step: the machine and its libraries, where
# both trials report them (a trial that does not name a component is not known to differ on it).
PAIRED_STACK = ("gpu", "sm", "driver", "cuda", "torch", "nccl")


# A verify step at world size 1 as the report places it: its grid cell, t_ar 0 (no latency to put on a t_ar axis).
WORLD_1_METHOD = "world size 1"
NO_ALLREDUCES = "world size 1: no allreduces in the verify step"


def _world_1_cell(cell: Cell | None) -> bool:
    """A grid cell with a tau* whose verify step ran at world size 1 (no allreduce)."""
    return cell is not None and cell.tau_star is not None and cell.note == WORLD_1


def _allreduces_measured(
    inputs: ModelInputs, campaign: Campaign, what_if: WhatIf | None, one_gpu: bool, any_t_ar: bool
) -> ModelInputs:
    """N_ar as measured at batch 1: 0 where the grid places verify steps run at world size 1 and nothing else in
    the report carries an allreduce (no approach's t_ar, no reported figure), unless a what-if gives the count.
    The campaign's N_ar (the default 122: 2 per layer under tensor parallelism) counts a verify step that
    communicates; one GPU runs none, and a curve or a break-even t_ar drawn with it would claim allreduces that
    never ran. Anywhere else the campaign's N_ar stands: the grid's cells above world size 1 read it too."""
    entered = inputs.allreduces_per_verify
    asked = what_if is not None and what_if.allreduces_per_verify is not None
    if not one_gpu or any_t_ar or asked or entered.value == 0 or reported_latencies(campaign, inputs):
        return inputs
    instead = f"; the campaign's {entered.value:g} counts a verify step that communicates" if entered.value else ""
    source = f"{NO_ALLREDUCES}: the verify steps measured ran on one GPU{instead}"
    laid = replace(inputs, allreduces_per_verify=Input(0.0, source))
    return replace(laid, missing=tuple(batch_1_missing(laid)))


# Recipe kinds whose trials never give an allreduce latency: they measure another input of the model (a draft
# head's step, an engine's acceptance), so an approach of theirs is never waiting for a t_ar.
NO_ALLREDUCE_KINDS = frozenset({"draft_step", "engine_acceptance"})


def _count(value: object) -> int | None:
    """A rank count as a recipe or a tag spells it (a campaign file may write "1"), else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return int(value) if isinstance(value, str) and value.strip().isdigit() else None


def measures_allreduce(approach: Approach, metrics: CampaignMetrics) -> bool:
    """Whether the approach is an allreduce candidate, one whose t_ar the report waits for until it has one. Not
    when its recipe's kind never measures an allreduce (NO_ALLREDUCE_KINDS), nor when it runs on one GPU, where a
    verify step runs no allreduce: its recipe's `world_size` (`tp_size` for sglang_server) is 1, or its trials'
    decode and verify steps all ran at world size 1 (tag `world_size` 1 or `allreduces` 0). Every other approach
    is one, run or not: an allreduce or sglang_server recipe above one GPU, a verify step whose world size is not
    known yet (it defaults to every visible GPU), a command, an approach with no recipe."""
    recipe = approach.recipe if isinstance(approach.recipe, dict) else {}
    kind = recipe.get("kind")
    if kind in NO_ALLREDUCE_KINDS:
        return False
    params = recipe.get("params") if isinstance(recipe.get("params"), dict) else {}
    if _count((params or {}).get("tp_size" if kind == "sglang_server" else "world_size")) == 1:
        return False
    steps = metrics.newest((MetricName.VERIFY_COMPUTE_MS, MetricName.DECODE_STEP_MS), approach.id)
    one_gpu = [m for m in steps if _count(m.tags.get("world_size")) == 1 or m.tags.get("allreduces") == 0]
    return not steps or len(one_gpu) < len(steps)


def _other_stacks(session: Session, inputs: ModelInputs, trial_ids: set[int | None]) -> dict[int, str]:
    """The latency trials measured on another stack than the trial the plain decode step T_base comes from:
    {trial id: "GPU NVIDIA RTX PRO 6000 Blackwell -> NVIDIA H200, SM 12.0 -> 9.0"}. None is checked while T_base
    is entered (no trial: the person who typed it chose it for these figures)."""
    base = inputs.t_base.trial_id
    wanted = {t for t in trial_ids if t is not None} - {base}
    if base is None or not wanted:
        return {}
    rows = session.execute(
        sa_select(Trial.id, Trial.fingerprint).where(col(Trial.id).in_([base, *sorted(wanted)]))  # type: ignore[call-overload]
    ).all()
    stacks = {trial_id: Conditions.of({}, fp) for trial_id, fp in rows}
    reference = stacks.get(base) or Conditions()
    out = {}
    for trial_id in wanted:
        difference = reference.stack_change(stacks.get(trial_id) or Conditions(), PAIRED_STACK)
        if difference:
            out[trial_id] = f"trial #{trial_id} ran on another stack than T_base's trial #{base}: {difference}"
    return out


def _point(
    approach: Approach,
    estimate: LatencyEstimate,
    *,
    tau_star: float | None,
    tau: float | None,
    tau_source: str,
    comm_ms: float,
    savings_ms: float | None,
    speedup: float | None,
    cell: Cell | None = None,
    grid_note: str = "",
) -> ApproachPoint:
    """One approach's point of the report."""
    assert approach.id is not None  # read from the database
    return ApproachPoint(
        approach_id=approach.id,
        key=approach.key,
        title=approach.title,
        status=approach.status,
        reason=approach.reason,
        stack=stack_summary(approach.verdict_fingerprint),
        latency=estimate,
        tau_star=tau_star,
        tau=tau,
        tau_source=tau_source,
        comm_ms=comm_ms,
        savings_ms=savings_ms,
        speedup=speedup,
        cell=cell,
        grid_note=grid_note,
    )


def _reported_sizes(campaign: Campaign, inputs: ModelInputs) -> dict[str, set[int]]:
    """Each approach's reported figures by size (a tok/s figure is derived at the verify size): an approach whose
    figures are all reported is not "without a latency" where one is at the verify size (issue 43 item 8)."""
    out: dict[str, set[int]] = {}
    for f in campaign.reported or []:
        if f.get("approach") and (f.get("t_ar_us") or f.get("tok_s")):
            size = int(f["bytes"]) if f.get("t_ar_us") and f.get("bytes") else inputs.verify_bytes
            out.setdefault(str(f["approach"]), set()).add(size)
    return out


def _without_latency(approach: Approach, sizes: set[int] | None, inputs: ModelInputs) -> str | None:
    """How the report lists an allreduce candidate without a latency at the verify size, or None where a reported
    figure at the verify size places it (the reported table): not "no latency"."""
    params = approach.recipe.get("params") if isinstance(approach.recipe, dict) else None
    tokens = params.get("tokens") if isinstance(params, dict) else None
    if sizes is None and isinstance(tokens, int) and tokens != inputs.verify_tokens:
        at = size_label(tokens * inputs.hidden_size * BYTES_PER_ELEMENT)
        return f"{approach.title} (its recipe runs {tokens} token{'s' if tokens > 1 else ''}: {at})"
    if sizes is None:
        return approach.title
    if inputs.verify_bytes not in sizes:  # reported only at other sizes: say which
        listed = ", ".join(size_label(b) for b in sorted(sizes))
        return f"{approach.title} (reported only at {listed})"
    return None


def _references(
    campaign: Campaign, inputs: ModelInputs, curve: BreakEvenCurve | None, rows: list[Approach]
) -> tuple[ReferencePoint, ...]:
    """The campaign's reported latencies as the report's reference points, each at its tau* on the curve."""
    titles = {a.key: a.title for a in rows}
    return tuple(
        ReferencePoint(
            label=f.get("label") or titles.get(f.get("approach") or "", "reported"),
            approach_key=f.get("approach"),
            latency=estimate,
            tau_star=curve.tau_star(estimate.t_ar_us) if curve else None,
            baseline=bool(f.get("baseline")),
            bytes=f.get("bytes") if estimate.method == "reported" else None,
        )
        for f, estimate in reported_latencies(campaign, inputs)
    )


def _cpu_floor(metrics: CampaignMetrics, rows: list[Approach], inputs: ModelInputs) -> tuple[CpuFloor, ...]:
    """The CPU-floor figures of the model's inputs (an allreduce only at the verify size): shown, never used."""
    by_id = {a.id: a.title for a in rows}
    return tuple(
        CpuFloor(by_id.get(m.approach_id, "?"), m.name, m.value, "us" if m.name.endswith("_us") else "ms", m.trial_id)
        for m in metrics.newest(
            (
                MetricName.ALLREDUCE_LATENCY_US,
                MetricName.ALLREDUCE_IN_SITU_US,
                MetricName.VERIFY_COMPUTE_MS,
                MetricName.DECODE_STEP_MS,
                MetricName.DRAFT_STEP_MS,
            )
        )
        if m.cpu_floor and (m.name != MetricName.ALLREDUCE_LATENCY_US or m.tags.get("bytes") == inputs.verify_bytes)
    )


def _grid_point(approach: Approach, estimate: LatencyEstimate, cell: Cell, inputs: ModelInputs) -> ApproachPoint:
    """An approach on the grid: its cell at batch 1, every figure the grid's (the same inputs)."""
    n_ar = int(inputs.allreduces_per_verify.value or 0)
    return _point(
        approach,
        estimate,
        tau_star=cell.tau_star.value if cell.tau_star is not None else None,
        tau=cell.tau,
        tau_source=_grid_tau_source(inputs, cell),
        comm_ms=cell.comm_ms if cell.comm_ms is not None else float(formula.comm_ms(n_ar, 0.0)),
        savings_ms=cell.savings_ms,
        speedup=cell.speedup.value if cell.speedup is not None else None,
        cell=cell,
    )


def _formula_point(
    approach: Approach,
    estimate: LatencyEstimate,
    metrics: CampaignMetrics,
    inputs: ModelInputs,
    own_tau_allowed: bool,
    grid_note: str,
) -> ApproachPoint:
    """An approach off the grid (or no grid given): tau* is the curve's at its t_ar (the chart's point), and the
    speedup the same formula's on the same batch-1 inputs where the grid has no place for the figure: no grid, or a
    t_ar measured in the serving step itself (in situ, a trace, derived from an engine's TPOT), which the grid's
    allreduce curves do not hold. Another off-grid approach (`grid_note` says why) gets no speedup."""
    own = (
        _from_metric(
            _first_by_preference(metrics.newest(MetricName.ACCEPT_LENGTH, approach.id), MetricName.ACCEPT_LENGTH)
        )
        if own_tau_allowed
        else None
    )
    tau = own.value if own else inputs.accept_length.value
    mine = inputs.costs(tau=tau) if tau is not None and not grid_note else None
    curve = inputs.curve()
    n_ar = int(inputs.allreduces_per_verify.value or 0)
    return _point(
        approach,
        estimate,
        tau_star=curve.tau_star(estimate.t_ar_us) if curve else None,
        tau=tau,
        tau_source=(own.source if own else inputs.accept_length.source),
        comm_ms=float(formula.comm_ms(n_ar, estimate.t_ar_us)),
        savings_ms=mine.savings_ms if mine else None,
        speedup=mine.speedup(estimate.t_ar_us) if mine else None,
        grid_note=grid_note,
    )


def profitability_report(
    session: Session,
    campaign: Campaign,
    what_if: WhatIf | None = None,
    *,
    metrics: CampaignMetrics | None = None,
    approach_rows: list[Approach] | None = None,
    inputs: ModelInputs | None = None,
    cells: dict[str, Cell] | None = None,
    off_grid: dict[str, str] | None = None,
) -> ProfitabilityReport:
    """Every approach with a t_ar at the verify message size, evaluated against the campaign's inputs.
    Pass `metrics` and `approach_rows` already read to compute a what-if without reading again; `inputs` (the
    answer's grid at batch 1, read.at_batch_1) in place of the campaign's own batch-1 picks, `cells` each
    approach's grid cell there and `off_grid` why an approach has none: then the report is the grid at batch 1
    (an approach on it shows its cell's figures, one off it no speedup). Without `cells` (no grid given) the
    points are evaluated by the same formula on the batch-1 inputs."""
    metrics = metrics if metrics is not None else load_campaign_metrics(session, campaign)
    rows = approach_rows if approach_rows is not None else approaches(session, campaign)
    inputs = inputs if inputs is not None else model_inputs(session, campaign, what_if, metrics)
    own_tau_allowed = not (what_if and what_if.accept_length is not None)
    gridded = cells is not None
    points: list[ApproachPoint] = []
    unmeasured: list[str] = []
    other_stack: list[tuple[str, str]] = []
    estimates = {a.id: approach_latency(metrics, a.id or 0, inputs) for a in rows}
    reported_sizes = _reported_sizes(campaign, inputs)
    one_gpu = any(estimates[a.id] is None and _world_1_cell((cells or {}).get(a.key)) for a in rows)
    inputs = _allreduces_measured(inputs, campaign, what_if, one_gpu, any(e is not None for e in estimates.values()))
    curve = inputs.curve()
    costs = inputs.costs()
    with_cell = {key for key, c in (cells or {}).items() if c.tau_star is not None}
    stacks = _other_stacks(
        session, inputs, {e.trial_id for a in rows if (e := estimates[a.id]) and a.key not in with_cell}
    )
    for approach in rows:
        assert approach.id is not None  # read from the database
        estimate = estimates[approach.id]
        found = (cells or {}).get(approach.key)
        cell = found if found is not None and found.tau_star is not None else None  # an open cell is no figure
        if estimate is None and _world_1_cell(cell):
            # A verify step at world size 1 runs no allreduce: its batch-1 point is its grid cell, t_ar 0.
            estimate = LatencyEstimate(0.0, WORLD_1_METHOD, "the verify step runs no allreduce on one GPU", None)
        if estimate is None:
            if measures_allreduce(approach, metrics):  # not a draft step, nor a verify step on one GPU
                note = _without_latency(approach, reported_sizes.get(approach.key), inputs)
                unmeasured += [note] if note else []
            continue
        if cell is None and estimate.trial_id is not None and estimate.trial_id in stacks:
            other_stack.append((approach.title, stacks[estimate.trial_id]))
            continue
        if cell is not None:  # on the grid, the point is its cell at batch 1: every figure the grid's
            points.append(_grid_point(approach, estimate, cell, inputs))
            continue
        note = ""
        if gridded and estimate.method not in BATCH_1_METHODS:
            note = (off_grid or {}).get(approach.key) or (found.note if found is not None else "") or NOT_ON_GRID
        points.append(_formula_point(approach, estimate, metrics, inputs, own_tau_allowed, note))
    references = _references(campaign, inputs, curve, rows)
    floor = _cpu_floor(metrics, rows, inputs)
    return ProfitabilityReport(
        inputs,
        curve,
        costs,
        tuple(points),
        references,
        floor,
        tuple(unmeasured),
        asks_speculation(campaign, rows, inputs),
        answers_for(curve, points, references, inputs.accept_length, {a.key: a.status for a in rows}),
        tuple(other_stack),
    )


# The what-if allreduce latency's label on the report (issue 32 item 8): tried in place of every measured and
# reported t_ar, never stored.
T_AR_LABEL = "what-if t_ar"


def with_allreduce_latency(report: ProfitabilityReport, t_ar_us: float) -> ProfitabilityReport:
    """The report answered with `t_ar_us` per allreduce in place of the measured curve: the what-if t_ar becomes
    the one figure the headline is answered with, and the measured points step aside (their latencies are what
    it replaces). `read_answer` lays it over an `AnswerQuery.t_ar_us`."""
    curve = report.curve
    latency = LatencyEstimate(
        t_ar_us, "what-if", "entered in the what-if: used in place of the measured and reported latencies", None
    )
    mine = ReferencePoint(T_AR_LABEL, None, latency, curve.tau_star(t_ar_us) if curve else None, True, None)
    references = (mine, *(replace(r, baseline=False) for r in report.references))
    answers = answers_for(curve, (), references, report.inputs.accept_length, {})
    return replace(report, points=(), references=references, answers=answers)
