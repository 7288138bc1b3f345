"""Is speculation profitable? The model in shared/domain.md and where its inputs come from.

Symbols, per speculative cycle (all times in ms unless the name says us):
    T_base    plain decode step at batch 1, ms/token = 1000 / baseline tok/s
    tau       mean accepted length incl. the bonus token (SGLang "accept len")
    T_draft   = draft steps x t_draft_step
    T_verify  = T_verify_compute + N_ar x t_ar
Speedup S = tau x T_base / (T_draft + T_verify); profitable iff S > 1, i.e. the verify
communication N_ar x t_ar is below the *speculation savings* tau x T_base - T_draft - T_verify_compute.
Break-even allreduce latency t_ar* = savings / N_ar; break-even acceptance tau* = (T_draft + T_verify) / T_base.

Where each input comes from (first that exists wins; `docs/profitability.md` says the same):
    baseline tok/s    campaign.baseline_tok_s, else the baseline trial's output throughput
    accept length     campaign.accept_length, else the newest accept-length metric of any trial
                      (bench `accept_length` > `/server_info` > decode log lines); an approach's own
                      speculative trial gives that approach's point its own tau
    draft cost        campaign.draft_steps x campaign.draft_step_ms (entered; no recipe measures it)
    verify compute    campaign.verify_compute_ms, else the newest verify_step `verify_compute_ms`
    allreduces        campaign.allreduces_per_verify
    t_ar per approach 1. allreduce recipe `allreduce_latency_us` at the verify message size
                         (tokens x hidden x 2 bytes): exact size, else log-log interpolation between
                         the sizes around it, else the nearest size (said so)
                      2. verify_step recipe `allreduce_in_situ_us` (communication inside a real step)
                      3. derived from an sglang_server speculative trial: its TPOT x accept length is
                         the cycle time, minus draft and verify compute, over N_ar
A missing input is reported as a `Missing` (what, and how to get it) instead of being guessed.
No FastAPI here: routes call `profitability_report` and render what it returns.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from sqlmodel import Session, select

from app.domain.fingerprint import STACK_COMPONENTS, component_value
from app.models import Approach, ApproachStatus, Campaign, Metric

BYTES_PER_ELEMENT = 2  # bf16 activations


class MetricName:
    """The metric names (emitted by runners/recipes) this model reads: the one place they are spelled."""

    ALLREDUCE_LATENCY_US = "allreduce_latency_us"  # allreduce recipe; tags bytes, tokens, mode, backend, world_size
    ALLREDUCE_IN_SITU_US = "allreduce_in_situ_us"  # verify_step recipe; tags tokens, allreduces, layers, bytes
    VERIFY_COMPUTE_MS = "verify_compute_ms"  # verify_step recipe
    OUTPUT_THROUGHPUT = "output_throughput_tok_s"  # sglang_server (bench_serving / bench_one_batch_server)
    GEN_THROUGHPUT_LOG = "decode_log_gen_throughput_tok_s"  # sglang_server, from Decode batch log lines
    MEDIAN_TPOT_MS = "median_tpot_ms"  # sglang_server
    # Accept length, best source first: the benchmark's figure, the server's cumulative one, decode log lines.
    ACCEPT_LENGTH = ("accept_length", "server_avg_spec_accept_length", "decode_log_accept_len")
    THROUGHPUT = (OUTPUT_THROUGHPUT, GEN_THROUGHPUT_LOG)


# ---- the model ------------------------------------------------------------------------------

def t_base_ms(baseline_tok_s: float) -> float:
    """Plain decode ms/token at batch 1."""
    return 1000.0 / baseline_tok_s


def leviathan_expected_tokens(alpha: float, gamma: int) -> float:
    """Expected tokens per cycle, (1 - alpha^(gamma+1)) / (1 - alpha) (Leviathan et al. 2023)."""
    if alpha == 1.0:
        return gamma + 1.0
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def leviathan_speedup(alpha: float, gamma: int, c: float) -> float:
    """Walltime improvement (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)); c = draft/target cost ratio."""
    return leviathan_expected_tokens(alpha, gamma) / (gamma * c + 1)


@dataclass(frozen=True)
class CycleCosts:
    """One speculative cycle's known costs; the allreduce latency t_ar is the open variable."""

    t_base_ms: float
    tau: float
    draft_ms: float
    verify_compute_ms: float
    n_ar: int

    @property
    def savings_ms(self) -> float:
        """tau x T_base - T_draft - T_verify_compute: what the verify communication must stay under."""
        return self.tau * self.t_base_ms - self.draft_ms - self.verify_compute_ms

    @property
    def break_even_t_ar_us(self) -> float | None:
        """t_ar* = savings / N_ar (None without allreduces: then communication cannot decide it)."""
        return self.savings_ms / self.n_ar * 1000.0 if self.n_ar > 0 else None

    def comm_ms(self, t_ar_us: float) -> float:
        return self.n_ar * t_ar_us / 1000.0

    def verify_ms(self, t_ar_us: float) -> float:
        return self.verify_compute_ms + self.comm_ms(t_ar_us)

    def speedup(self, t_ar_us: float) -> float:
        """S = tau x T_base / (T_draft + T_verify)."""
        return self.tau * self.t_base_ms / (self.draft_ms + self.verify_ms(t_ar_us))

    def break_even_tau(self, t_ar_us: float) -> float:
        """tau* = (T_draft + T_verify) / T_base."""
        return (self.draft_ms + self.verify_ms(t_ar_us)) / self.t_base_ms

    def profitable(self, t_ar_us: float) -> bool:
        return self.comm_ms(t_ar_us) < self.savings_ms


# ---- inputs ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Missing:
    """An input the model needs and does not have: what it is and how to get it."""

    what: str
    how: str


@dataclass(frozen=True)
class Input:
    value: float | None
    source: str = ""  # "entered on the campaign", "trial #12 (output_throughput_tok_s)", "what-if"
    trial_id: int | None = None


@dataclass(frozen=True)
class WhatIf:
    """Values to try instead of the campaign's; computing with them changes nothing stored."""

    accept_length: float | None = None
    draft_steps: int | None = None
    draft_step_ms: float | None = None
    verify_compute_ms: float | None = None
    allreduces_per_verify: int | None = None
    verify_tokens: int | None = None
    baseline_tok_s: float | None = None

    def any(self) -> bool:
        return any(v is not None for v in self.__dict__.values())


@dataclass(frozen=True)
class ModelInputs:
    baseline_tok_s: Input
    accept_length: Input
    draft_steps: Input
    draft_step_ms: Input
    verify_compute_ms: Input
    allreduces_per_verify: Input
    verify_tokens: int
    hidden_size: int
    missing: tuple[Missing, ...] = ()

    @property
    def verify_bytes(self) -> int:
        """Bytes per allreduce in a verify step: tokens x hidden x 2 (bf16)."""
        return self.verify_tokens * self.hidden_size * BYTES_PER_ELEMENT

    def costs(self, tau: float | None = None) -> CycleCosts | None:
        """The cycle costs, or None while an input is missing. `tau` replaces the campaign's accept length."""
        if self.missing:
            return None
        return CycleCosts(
            t_base_ms=t_base_ms(self.baseline_tok_s.value),  # type: ignore[arg-type]
            tau=tau if tau is not None else self.accept_length.value,  # type: ignore[arg-type]
            draft_ms=self.draft_steps.value * self.draft_step_ms.value,  # type: ignore[operator]
            verify_compute_ms=self.verify_compute_ms.value,  # type: ignore[arg-type]
            n_ar=int(self.allreduces_per_verify.value),  # type: ignore[arg-type]
        )


def _metrics(session: Session, campaign: Campaign, names: tuple[str, ...] | str,
             approach_id: int | None = None, trial_id: int | None = None) -> list[Metric]:
    """Metrics by name, newest trial first (then the order they were logged)."""
    names = (names,) if isinstance(names, str) else names
    query = select(Metric).where(Metric.campaign_id == campaign.id, Metric.name.in_(names))  # type: ignore[attr-defined]
    if approach_id is not None:
        query = query.where(Metric.approach_id == approach_id)
    if trial_id is not None:
        query = query.where(Metric.trial_id == trial_id)
    rows = list(session.exec(query.order_by(Metric.trial_id.desc(), Metric.seq, Metric.index)))  # type: ignore[attr-defined]
    return rows


def _accept_lengths(session: Session, campaign: Campaign, **where: int | None) -> list[Metric]:
    """Accept-length metrics that mean speculation ran: tau counts the bonus token, so it is >= 1
    (a server without speculation may report 0)."""
    return [m for m in _metrics(session, campaign, MetricName.ACCEPT_LENGTH, **where) if m.value >= 1]


def _first_by_preference(rows: list[Metric], names: tuple[str, ...]) -> Metric | None:
    """The newest trial's metric, taking the best-ranked name within that trial."""
    if not rows:
        return None
    newest = rows[0].trial_id
    same_trial = [m for m in rows if m.trial_id == newest]
    return min(same_trial, key=lambda m: (names.index(m.name), -m.seq, -m.index))


def _entered(value: float | None) -> Input | None:
    return Input(float(value), "entered on the campaign") if value is not None else None


def _from_metric(metric: Metric | None, what: str = "") -> Input | None:
    if metric is None:
        return None
    label = f"trial #{metric.trial_id} ({metric.name}{', ' + what if what else ''})"
    return Input(metric.value, label, metric.trial_id)


def model_inputs(session: Session, campaign: Campaign, what_if: WhatIf | None = None) -> ModelInputs:
    """The campaign's model inputs with their sources, what-if values laid over them."""
    what_if = what_if or WhatIf()

    def pick(name: str, *candidates: Input | None) -> Input:
        override = getattr(what_if, name)
        if override is not None:
            return Input(float(override), "what-if")
        return next((c for c in candidates if c is not None), Input(None))

    baseline_metric = None
    if campaign.baseline_trial_id is not None:
        baseline_metric = _first_by_preference(
            _metrics(session, campaign, MetricName.THROUGHPUT, trial_id=campaign.baseline_trial_id),
            MetricName.THROUGHPUT)
    baseline = pick("baseline_tok_s", _entered(campaign.baseline_tok_s), _from_metric(baseline_metric, "baseline trial"))
    accept = pick("accept_length", _entered(campaign.accept_length),
                  _from_metric(_first_by_preference(_accept_lengths(session, campaign),
                                                    MetricName.ACCEPT_LENGTH)))
    verify_tokens = what_if.verify_tokens or campaign.verify_tokens
    compute_rows = _metrics(session, campaign, MetricName.VERIFY_COMPUTE_MS)
    compute_metric = next((m for m in compute_rows if m.tags.get("tokens") == verify_tokens), None) or \
        (compute_rows[0] if compute_rows else None)
    verify_compute = pick("verify_compute_ms", _entered(campaign.verify_compute_ms),
                          _from_metric(compute_metric, "synthetic verify step"))
    inputs = ModelInputs(
        baseline_tok_s=baseline,
        accept_length=accept,
        draft_steps=pick("draft_steps", _entered(campaign.draft_steps)),
        draft_step_ms=pick("draft_step_ms", _entered(campaign.draft_step_ms)),
        verify_compute_ms=verify_compute,
        allreduces_per_verify=pick("allreduces_per_verify", _entered(campaign.allreduces_per_verify)),
        verify_tokens=verify_tokens,
        hidden_size=campaign.hidden_size,
    )
    return replace(inputs, missing=tuple(_missing(inputs)))


def _missing(inputs: ModelInputs) -> list[Missing]:
    out = []
    if not inputs.baseline_tok_s.value:
        out.append(Missing("baseline decode throughput (tok/s at batch 1)",
                           "run an sglang_server trial without speculation and mark it the baseline trial, "
                           "or enter the baseline tok/s on the campaign"))
    if inputs.accept_length.value is None:
        out.append(Missing("accept length (tau, incl. the bonus token)",
                           "run an sglang_server trial with EAGLE-3 (--speculative-algorithm EAGLE3), "
                           "or enter it on the campaign or in the what-if"))
    if inputs.draft_steps.value is None or inputs.draft_step_ms.value is None:
        out.append(Missing("draft cost (draft steps x ms per draft step)",
                           "enter the draft steps (--speculative-num-steps; sglang picks 3 for DeepSeek-V3) "
                           "and the draft model's ms per step; 0 ms gives the communication-only bound"))
    if inputs.verify_compute_ms.value is None:
        out.append(Missing("verify compute (ms per verify step, without communication)",
                           "run a verify_step trial (it reports verify_compute_ms), or enter it on the campaign"))
    if inputs.allreduces_per_verify.value is None:
        out.append(Missing("allreduces per verify step",
                           "enter it on the campaign: 2 per layer for tensor parallelism (122 for 61 layers)"))
    return out


# ---- allreduce latency per approach -----------------------------------------------------------

@dataclass(frozen=True)
class LatencyEstimate:
    """An approach's allreduce latency at the verify message size, and how it was obtained."""

    t_ar_us: float
    method: str  # measured | interpolated | nearest | in situ | derived
    note: str  # what a reader needs to trust it
    trial_id: int


@dataclass(frozen=True)
class LatencyPoint:
    bytes: int
    latency_us: float
    trial_id: int
    tags: dict[str, Any] = field(default_factory=dict)


def _mode_rank(tags: dict[str, Any]) -> tuple[int, int]:
    # SGLang decodes under CUDA graphs, so a graphed measurement is the one that predicts serving.
    return (1 if tags.get("mode") == "graph" else 0, int(tags.get("world_size") or 0))


def allreduce_curve(metrics: list[Metric]) -> list[LatencyPoint]:
    """One approach's latency-vs-bytes curve: the newest trial's points in its preferred mode."""
    if not metrics:
        return []
    newest = max(m.trial_id for m in metrics)
    rows = [m for m in metrics if m.trial_id == newest and isinstance(m.tags.get("bytes"), (int, float))]
    if not rows:
        return []
    best = max(_mode_rank(m.tags) for m in rows)
    points: dict[int, LatencyPoint] = {}
    for m in rows:
        if _mode_rank(m.tags) == best:
            points[int(m.tags["bytes"])] = LatencyPoint(int(m.tags["bytes"]), m.value, m.trial_id, dict(m.tags))
    return [points[b] for b in sorted(points)]


def latency_at(curve: list[LatencyPoint], nbytes: int) -> tuple[float, str, str] | None:
    """(latency us, method, note) at `nbytes` from a measured curve: exact, log-log interpolation
    between the sizes around it, or the nearest measured size when it lies outside the curve."""
    if not curve:
        return None
    for p in curve:
        if p.bytes == nbytes:
            return p.latency_us, "measured", f"measured at {_size(nbytes)}"
    below = [p for p in curve if p.bytes < nbytes]
    above = [p for p in curve if p.bytes > nbytes]
    if below and above:
        lo, hi = below[-1], above[0]
        if lo.latency_us > 0 and hi.latency_us > 0:
            frac = (math.log(nbytes) - math.log(lo.bytes)) / (math.log(hi.bytes) - math.log(lo.bytes))
            value = math.exp(math.log(lo.latency_us) + frac * (math.log(hi.latency_us) - math.log(lo.latency_us)))
            return value, "interpolated", (f"interpolated (log-log) between {_size(lo.bytes)} and "
                                           f"{_size(hi.bytes)}; not measured at {_size(nbytes)}")
    nearest = min(curve, key=lambda p: abs(math.log(p.bytes) - math.log(nbytes)))
    return nearest.latency_us, "nearest", (f"nearest measured size {_size(nearest.bytes)}; "
                                           f"not measured at {_size(nbytes)}")


def _size(nbytes: int) -> str:
    return f"{nbytes / 1024:g} KiB" if nbytes % 1024 == 0 else f"{nbytes} B"


def approach_latency(session: Session, campaign: Campaign, approach: Approach,
                     inputs: ModelInputs) -> LatencyEstimate | None:
    """The approach's t_ar at the verify message size, by the precedence in the module docstring."""
    curve = allreduce_curve(_metrics(session, campaign, MetricName.ALLREDUCE_LATENCY_US, approach_id=approach.id))
    found = latency_at(curve, inputs.verify_bytes)
    if found:
        value, method, note = found
        tags = curve[0].tags
        how = ", ".join(f"{k} {tags[k]}" for k in ("backend", "mode", "world_size") if tags.get(k) is not None)
        return LatencyEstimate(value, method, f"allreduce benchmark ({how}): {note}", curve[0].trial_id)

    in_situ = _metrics(session, campaign, MetricName.ALLREDUCE_IN_SITU_US, approach_id=approach.id)
    if in_situ:
        newest = [m for m in in_situ if m.trial_id == in_situ[0].trial_id]
        exact = [m for m in newest if m.tags.get("tokens") == inputs.verify_tokens]
        metric = exact[0] if exact else min(
            newest, key=lambda m: abs(math.log(max(int(m.tags.get("tokens") or 1), 1)) - math.log(inputs.verify_tokens)))
        note = "in situ in a synthetic verify step"
        if not exact:
            note += f" at {metric.tags.get('tokens')} tokens (not {inputs.verify_tokens})"
        return LatencyEstimate(metric.value, "in situ", note, metric.trial_id)

    return _derived_latency(session, campaign, approach, inputs)


def _derived_latency(session: Session, campaign: Campaign, approach: Approach,
                     inputs: ModelInputs) -> LatencyEstimate | None:
    """From a speculative sglang_server trial: cycle = TPOT x tau = T_draft + T_verify_compute + N_ar x t_ar."""
    costs = inputs.costs()
    if costs is None or costs.n_ar <= 0:
        return None
    accepts = _accept_lengths(session, campaign, approach_id=approach.id)
    for trial_id in dict.fromkeys(m.trial_id for m in accepts):
        tau = _first_by_preference([m for m in accepts if m.trial_id == trial_id], MetricName.ACCEPT_LENGTH)
        timing = _metrics(session, campaign, (MetricName.MEDIAN_TPOT_MS, *MetricName.THROUGHPUT), trial_id=trial_id)
        tpot = next((m.value for m in timing if m.name == MetricName.MEDIAN_TPOT_MS), None)
        if tpot is None:
            tput = next((m.value for m in timing if m.name in MetricName.THROUGHPUT and m.value > 0), None)
            tpot = 1000.0 / tput if tput else None
        if tau is None or tpot is None:
            continue
        comm_ms = tau.value * tpot - costs.draft_ms - costs.verify_compute_ms
        if comm_ms <= 0:
            continue
        return LatencyEstimate(comm_ms / costs.n_ar * 1000.0, "derived",
                               f"derived from SGLang trial #{trial_id}: TPOT {tpot:.2f} ms x accept length "
                               f"{tau.value:.2f}, minus draft and verify compute, over {costs.n_ar} allreduces",
                               trial_id)
    return None


def approach_accept_length(session: Session, campaign: Campaign, approach: Approach) -> Input | None:
    """The approach's own measured accept length (its newest speculative trial), if any."""
    metric = _first_by_preference(_accept_lengths(session, campaign, approach_id=approach.id),
                                  MetricName.ACCEPT_LENGTH)
    return _from_metric(metric)


# ---- the report -----------------------------------------------------------------------------

@dataclass(frozen=True)
class ApproachPoint:
    """One approach on the break-even chart."""

    approach_id: int
    key: str
    title: str
    status: str
    reason: str
    stack: str
    latency: LatencyEstimate
    tau: float
    tau_source: str
    comm_ms: float
    savings_ms: float
    speedup: float
    break_even_tau: float

    @property
    def profitable(self) -> bool:
        return self.comm_ms < self.savings_ms


@dataclass(frozen=True)
class ProfitabilityReport:
    inputs: ModelInputs
    costs: CycleCosts | None
    points: tuple[ApproachPoint, ...]
    latencies: dict[int, LatencyEstimate]  # approach id -> t_ar, known even while other inputs are missing
    unmeasured: tuple[str, ...]  # approach titles without a t_ar at the verify size

    @property
    def missing(self) -> tuple[Missing, ...]:
        return self.inputs.missing

    @property
    def best(self) -> ApproachPoint | None:
        """The fastest usable approach (dead ends excluded: they cannot be deployed)."""
        usable = [p for p in self.points if p.status != ApproachStatus.dead_end]
        return max(usable, key=lambda p: p.speedup) if usable else None

    @property
    def profitable_now(self) -> ApproachPoint | None:
        best = self.best
        return best if best is not None and best.profitable else None

    @property
    def communication_only_tau(self) -> tuple[float, float] | None:
        """(tau*, t_ar us) with zero draft and verify compute at the best measured t_ar: a lower bound on
        the acceptance speculation needs, known from the baseline and one allreduce measurement alone."""
        base = self.inputs.baseline_tok_s.value
        n_ar = self.inputs.allreduces_per_verify.value
        if not base or not n_ar or not self.latencies:
            return None
        t_ar = min(e.t_ar_us for e in self.latencies.values())
        return n_ar * t_ar / 1000.0 / t_base_ms(base), t_ar


def profitability_report(session: Session, campaign: Campaign, what_if: WhatIf | None = None) -> ProfitabilityReport:
    """Every approach with a t_ar at the verify message size, evaluated against the campaign's inputs."""
    from app.domain.inventory import approaches

    inputs = model_inputs(session, campaign, what_if)
    costs = inputs.costs()
    points: list[ApproachPoint] = []
    latencies: dict[int, LatencyEstimate] = {}
    unmeasured: list[str] = []
    for approach in approaches(session, campaign):
        estimate = approach_latency(session, campaign, approach, inputs)
        if estimate is None:
            unmeasured.append(approach.title)
            continue
        latencies[approach.id] = estimate  # type: ignore[index]
        if costs is None:
            continue
        own = None if (what_if and what_if.accept_length is not None) else approach_accept_length(session, campaign, approach)
        tau = own.value if own else costs.tau
        mine = replace(costs, tau=tau)
        points.append(ApproachPoint(
            approach_id=approach.id, key=approach.key, title=approach.title, status=approach.status,  # type: ignore[arg-type]
            reason=approach.reason, stack=stack_summary(approach.verdict_fingerprint),
            latency=estimate, tau=tau, tau_source=(own.source if own else inputs.accept_length.source),
            comm_ms=mine.comm_ms(estimate.t_ar_us), savings_ms=mine.savings_ms,
            speedup=mine.speedup(estimate.t_ar_us), break_even_tau=mine.break_even_tau(estimate.t_ar_us),
        ))
    return ProfitabilityReport(inputs, costs, tuple(points), latencies, tuple(unmeasured))


# ---- measurements for the charts ------------------------------------------------------------

@dataclass(frozen=True)
class LatencySeries:
    approach_title: str
    status: str
    points: tuple[LatencyPoint, ...]


def latency_series(session: Session, campaign: Campaign) -> list[LatencySeries]:
    """Each approach's allreduce latency-vs-size curve (newest trial, preferred mode)."""
    from app.domain.inventory import approaches

    by_approach: dict[int, list[Metric]] = defaultdict(list)
    for m in _metrics(session, campaign, MetricName.ALLREDUCE_LATENCY_US):
        by_approach[m.approach_id].append(m)
    out = []
    for approach in approaches(session, campaign):
        curve = allreduce_curve(by_approach.get(approach.id, []))  # type: ignore[arg-type]
        if curve:
            out.append(LatencySeries(approach.title, approach.status, tuple(curve)))
    return out


@dataclass(frozen=True)
class ThroughputRow:
    approach_title: str
    status: str
    reason: str
    tok_s: float | None  # None: never measured
    trial_id: int | None
    speculative: bool


def throughput_rows(session: Session, campaign: Campaign) -> list[ThroughputRow]:
    """Each approach's best measured decode throughput (None when it has none), in priority order."""
    from app.domain.inventory import approaches

    rows = _metrics(session, campaign, MetricName.THROUGHPUT)
    speculative_trials = {m.trial_id for m in _accept_lengths(session, campaign)}
    out = []
    for approach in approaches(session, campaign):
        mine = [m for m in rows if m.approach_id == approach.id]
        # Per trial, the benchmark's figure beats the decode-log one; then the best trial.
        per_trial = {}
        for m in mine:
            if m.trial_id not in per_trial or MetricName.THROUGHPUT.index(m.name) < MetricName.THROUGHPUT.index(per_trial[m.trial_id].name):
                per_trial[m.trial_id] = m
        best = max(per_trial.values(), key=lambda m: m.value, default=None)
        out.append(ThroughputRow(approach.title, approach.status, approach.reason,
                                 best.value if best else None, best.trial_id if best else None,
                                 bool(best and best.trial_id in speculative_trials)))
    return out


# ---- stack labels ---------------------------------------------------------------------------

_SUMMARY_COMPONENTS = ("torch", "cuda", "nccl", "sglang", "sm")


def stack_summary(fingerprint: dict[str, Any] | None) -> str:
    """A short label of a stack fingerprint, e.g. "torch 2.11.0 / CUDA 12.8 / SM 9.0".

    Only version components are read: a fingerprint also holds the host name, never shown."""
    parts = []
    for component in _SUMMARY_COMPONENTS:
        value = component_value(fingerprint, component)
        if value:
            parts.append(f"{STACK_COMPONENTS[component]} {value[:32]}")
    return " / ".join(parts)
