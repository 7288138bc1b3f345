"""Is speculation profitable? The model in shared/domain.md and where its inputs come from.

Symbols, per speculative cycle (all times in ms unless the name says us):
    T_base    plain decode step at batch 1, ms/token = 1000 / baseline tok/s
    tau       mean accepted length incl. the bonus token (SGLang "accept len")
    T_draft   = draft steps x t_draft_step
    T_verify  = T_verify_compute + N_ar x t_ar
Speedup S = tau x T_base / (T_draft + T_verify); profitable iff S > 1, i.e. the verify
communication N_ar x t_ar is below the *speculation savings* tau x T_base - T_draft - T_verify_compute.
Break-even allreduce latency t_ar* = savings / N_ar; break-even acceptance
tau*(t_ar) = (T_draft + T_verify_compute + N_ar x t_ar) / T_base.

The break-even curve tau*(t_ar) needs only T_base and N_ar: while the draft cost or the verify compute
is unknown it is drawn with them at zero, a *lower bound* (labelled so), and it tightens as they become
known. Accept length is only needed to say whether speculation pays now.

Where each input comes from (first that exists wins; `docs/profitability.md` says the same):
    baseline tok/s    campaign.baseline_tok_s, else the baseline trial's output throughput
    T_base            1000 / baseline tok/s, else the fastest GPU `decode_step_ms` (synthetic plain decode step)
    accept length     campaign.accept_length, else the newest accept-length metric of any trial
                      (bench `accept_length` > `/server_info` > decode log lines); an approach's own
                      speculative trial gives that approach's point its own tau
    draft cost        campaign.draft_steps x (campaign.draft_step_ms, else the newest GPU `draft_step_ms`)
    verify compute    campaign.verify_compute_ms, else the newest GPU verify_step `verify_compute_ms`
    allreduces        campaign.allreduces_per_verify, else a stored profiler trace's allreduces per verify
                      or decode step ("from trace #id": device kernels first; a CPU trace's count only when
                      its trial measured the full geometry)
    t_ar per approach 1. allreduce recipe `allreduce_latency_us` at the verify message size
                         (tokens x hidden x 2 bytes): exact size, else log-log interpolation between
                         the sizes around it, else the nearest size (said so)
                      2. verify_step recipe `allreduce_in_situ_us` (communication inside a real step)
                      3. the mean allreduce kernel of the approach's newest device trace ("from trace
                         #id": in situ, at the profiled step's message size)
                      4. derived from an sglang_server speculative trial: its TPOT x accept length is
                         the cycle time, minus draft and verify compute, over N_ar
    reported figures  campaign.reported: a figure from elsewhere (with its source) places an approach on
                      the chart until it is measured; a plain-decode tok/s is turned into a t_ar against
                      the baseline's reported t_ar
Figures measured on a CPU or at a scaled-down geometry (tags `device: cpu`, `scaled: true`, or the
gloo backend) are a *CPU floor*: shown, labelled so, and never fed to the model.
Multi-node trials also report allreduces within each node and among the node leaders (`scope: node`,
`scope: cross-node`); the model and the charts read the world's figures only (`is_world_figure`).
A missing input is reported as a `Missing` (what, and how to get it) instead of being guessed.

Scale: `profitability_report` reads the campaign's metrics in one pass (`load_campaign_metrics`: one
grouped query for the trials that matter, one for their rows, as columns), then works in Python.
No FastAPI here: routes call `profitability_report` and render what it returns.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import Text, cast, exists, or_
from sqlalchemy import select as sa_select
from sqlmodel import Session, select

from app.domain.artifacts import campaign_traces
from app.domain.fingerprint import STACK_COMPONENTS, component_value
from app.domain.inventory import approaches
from app.domain.traces import StoredTrace
from app.models import Approach, ApproachStatus, Campaign, Metric, ModelInputFields
from runners.recipes.metric import MetricName

BYTES_PER_ELEMENT = 2  # bf16 activations

# Every metric the model or its charts read.
MODEL_METRICS = (
    MetricName.ALLREDUCE_LATENCY_US,
    MetricName.ALLREDUCE_IN_SITU_US,
    MetricName.VERIFY_COMPUTE_MS,
    MetricName.DECODE_STEP_MS,
    MetricName.DRAFT_STEP_MS,
    MetricName.MEDIAN_TPOT_MS,
    *MetricName.THROUGHPUT,
    *MetricName.ACCEPT_LENGTH,
)


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


@dataclass(frozen=True)
class BreakEvenCurve:
    """tau*(t_ar) = (T_draft + T_verify_compute + N_ar x t_ar) / T_base: the accept length speculation must
    exceed. An unknown draft cost or verify compute counts as zero, which makes the curve a lower bound."""

    t_base_ms: float
    n_ar: int
    draft_ms: float | None
    verify_compute_ms: float | None

    @property
    def lower_bound(self) -> bool:
        return self.draft_ms is None or self.verify_compute_ms is None

    @property
    def unknown(self) -> tuple[str, ...]:
        """The terms counted as zero, in words."""
        return tuple(
            what
            for what, value in (("draft cost", self.draft_ms), ("verify compute", self.verify_compute_ms))
            if value is None
        )

    @property
    def fixed_ms(self) -> float:
        """The known non-communication part of a cycle: T_draft + T_verify_compute."""
        return (self.draft_ms or 0.0) + (self.verify_compute_ms or 0.0)

    def tau_star(self, t_ar_us: float) -> float:
        return (self.fixed_ms + self.n_ar * t_ar_us / 1000.0) / self.t_base_ms

    @property
    def contains(self) -> str:
        """What tau* counts, in words: the page says "tau* (communication only)" rather than a bare tau*."""
        if self.draft_ms is None and self.verify_compute_ms is None:
            return "communication only"
        if self.verify_compute_ms is None:
            return "communication and draft"
        if self.draft_ms is None:
            return "communication and verify compute"
        return "the full break-even"

    @property
    def label(self) -> str:
        if not self.lower_bound:
            return "break-even accept length τ*"
        return f"lower bound on τ* ({' and '.join(self.unknown)} not known yet, counted as 0)"


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


class WhatIf:
    """Values to try instead of the campaign's, by input name (any of `ModelInputFields.WHAT_IF`, read as
    attributes; a left-out one is None); computing with them changes nothing stored."""

    def __init__(self, **values: float | None) -> None:
        unknown = sorted(set(values) - set(ModelInputFields.WHAT_IF))
        if unknown:
            raise TypeError(f"not a what-if input: {', '.join(unknown)}")
        self.values: dict[str, float] = {name: v for name, v in values.items() if v is not None}

    def __getattr__(self, name: str) -> float | None:
        if name in ModelInputFields.WHAT_IF:
            return self.values.get(name)
        raise AttributeError(name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WhatIf) and other.values == self.values

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"WhatIf({', '.join(f'{k}={v!r}' for k, v in self.values.items())})"

    def any(self) -> bool:
        return bool(self.values)


@dataclass(frozen=True)
class ModelInputs:
    baseline_tok_s: Input
    t_base: Input  # ms per plain decode step
    accept_length: Input
    draft_steps: Input
    draft_step_ms: Input
    verify_compute_ms: Input
    allreduces_per_verify: Input
    verify_tokens: int
    hidden_size: int
    missing: tuple[Missing, ...] = ()

    def sources(self) -> list[tuple[str, Input]]:
        """Each input the model reads, labelled as its field is (ModelInputFields), with T_base after the
        baseline it comes from."""
        out = []
        for name, info in ModelInputFields.model_fields.items():
            found = getattr(self, name, None)
            if isinstance(found, Input):
                out.append((info.title or name, found))
                if name == "baseline_tok_s":
                    out.append(("T_base ms", self.t_base))
        return out

    @property
    def verify_bytes(self) -> int:
        """Bytes per allreduce in a verify step: tokens x hidden x 2 (bf16)."""
        return self.verify_tokens * self.hidden_size * BYTES_PER_ELEMENT

    @property
    def draft_ms(self) -> float | None:
        if self.draft_steps.value is None or self.draft_step_ms.value is None:
            return None
        return self.draft_steps.value * self.draft_step_ms.value

    def curve(self) -> BreakEvenCurve | None:
        """The break-even curve, or None without T_base and N_ar."""
        if not self.t_base.value or not self.allreduces_per_verify.value:
            return None
        return BreakEvenCurve(
            self.t_base.value, int(self.allreduces_per_verify.value), self.draft_ms, self.verify_compute_ms.value
        )

    def costs(self, tau: float | None = None) -> CycleCosts | None:
        """The full cycle costs, or None while an input is missing. `tau` replaces the campaign's accept length."""
        tau = tau if tau is not None else self.accept_length.value
        if (
            self.t_base.value is None
            or tau is None
            or self.draft_ms is None
            or self.verify_compute_ms.value is None
            or self.allreduces_per_verify.value is None
        ):
            return None
        return CycleCosts(
            t_base_ms=self.t_base.value,
            tau=tau,
            draft_ms=self.draft_ms,
            verify_compute_ms=self.verify_compute_ms.value,
            n_ar=int(self.allreduces_per_verify.value),
        )


# ---- the campaign's metrics, in one pass ------------------------------------------------------


def is_cpu_floor(tags: dict[str, Any]) -> bool:
    """Measured on a CPU or at a scaled-down geometry: a floor anyone can measure, never a model input."""
    return tags.get("device") == "cpu" or bool(tags.get("scaled")) or tags.get("backend") == "gloo"


def is_world_figure(tags: dict[str, Any]) -> bool:
    """A figure of the trial's whole world: untagged (single node) or `scope: world` (multi-node trials
    also report `scope: node` and `scope: cross-node` figures, which describe part of the world)."""
    return tags.get("scope", "world") == "world"


@dataclass(frozen=True)
class MetricRow:
    trial_id: int
    approach_id: int
    name: str
    value: float
    tags: dict[str, Any]
    seq: int
    index: int

    @property
    def cpu_floor(self) -> bool:
        return is_cpu_floor(self.tags)


class CampaignMetrics:
    """The metrics the model reads, for one campaign: for each approach and metric name the rows of its
    newest trial, the trials holding each approach's best throughput, and the baseline trial's rows."""

    def __init__(self, rows: Iterable[MetricRow], traces: Iterable[StoredTrace] = ()) -> None:
        self.traces = tuple(traces)  # the campaign's read profiler traces, newest first (`campaign_traces`)
        # A multi-node trial also reports allreduces within each node and among the node leaders
        # (tag scope: node | cross-node); the model and the charts read the world's figures only.
        rows = [m for m in rows if is_world_figure(m.tags)]
        self.rows = sorted(rows, key=lambda m: (-m.trial_id, m.seq, m.index))  # newest trial first
        self._newest: dict[tuple[int, str], list[MetricRow]] = {}  # (approach, name) -> its newest trial's rows
        self._by_trial: dict[int, list[MetricRow]] = defaultdict(list)
        self._by_name: dict[str, list[MetricRow]] = defaultdict(list)
        for m in self.rows:
            rows_of = self._newest.setdefault((m.approach_id, m.name), [m])
            if rows_of[0] is not m and rows_of[0].trial_id == m.trial_id:
                rows_of.append(m)
            self._by_trial[m.trial_id].append(m)
            self._by_name[m.name].append(m)
        self._by_approach: dict[int, list[tuple[str, list[MetricRow]]]] = defaultdict(list)
        for (approach_id, name), found in self._newest.items():
            self._by_approach[approach_id].append((name, found))

    def newest(self, names: tuple[str, ...] | str, approach_id: int | None = None) -> list[MetricRow]:
        """Rows of `names` from each approach's newest trial reporting that name, newest trial first
        (one approach, or every approach of the campaign)."""
        names = (names,) if isinstance(names, str) else names
        if approach_id is not None:
            found = [m for name, rows in self._by_approach.get(approach_id, []) if name in names for m in rows]
        else:
            found = [
                m
                for name in names
                for m in self._by_name.get(name, [])
                if self._newest[(m.approach_id, name)][0].trial_id == m.trial_id
            ]
        return sorted(found, key=lambda m: (-m.trial_id, m.seq, m.index))

    def of_trial(self, trial_id: int, names: tuple[str, ...]) -> list[MetricRow]:
        return [m for m in self._by_trial.get(trial_id, []) if m.name in names]

    def all(self, names: tuple[str, ...]) -> list[MetricRow]:
        return [m for name in names for m in self._by_name.get(name, [])]

    def forward_trace(self) -> StoredTrace | None:
        """The newest trace that counts N_ar over a forward pass of the target model (a verify or decode step),
        preferring one of device kernels; a CPU trace's count only where its trial's figures (read here) say it
        measured the real geometry (none is `scaled`)."""
        counted = [t for t in self.traces if t.forward_n_ar is not None]
        device = [t for t in counted if t.figures.get("device")]
        full = [
            t
            for t in counted
            if self._by_trial.get(t.trial_id) and not any(m.tags.get("scaled") for m in self._by_trial[t.trial_id])
        ]
        return next(iter(device or full), None)

    def approach_trace(self, approach_id: int) -> StoredTrace | None:
        """The approach's newest trace with a device allreduce time (its in-situ t_ar)."""
        return next((t for t in self.traces if t.approach_id == approach_id and t.t_ar_us is not None), None)


def _accept_filter(table: Any) -> Any:
    # tau counts the bonus token, so a real accept length is >= 1 (a server without speculation may report 0).
    return or_(table.name.not_in(MetricName.ACCEPT_LENGTH), table.value >= 1)


def _newest_trial(campaign_id: int, name: str) -> Any:
    """The newest trial of the outer approach reporting `name`: one index seek (campaign, name, approach,
    trial) per approach, not a scan of the campaign's metrics."""
    m = Metric.__table__.alias()  # type: ignore[attr-defined]
    query = select(m.c.trial_id).where(m.c.campaign_id == campaign_id, m.c.name == name, m.c.approach_id == Approach.id)
    if name in MetricName.ACCEPT_LENGTH:
        query = query.where(m.c.value >= 1)  # as _accept_filter
    return query.order_by(m.c.trial_id.desc()).limit(1).scalar_subquery()


def _best_trial(campaign_id: int, name: str) -> Any:
    """The trial holding the outer approach's highest `name` (the newest of equal ones): one seek into the
    (campaign, name, approach, value, trial) index, read backwards."""
    m = Metric.__table__.alias()  # type: ignore[attr-defined]
    return (
        select(m.c.trial_id)
        .where(m.c.campaign_id == campaign_id, m.c.name == name, m.c.approach_id == Approach.id)
        .order_by(m.c.value.desc(), m.c.trial_id.desc())
        .limit(1)
        .scalar_subquery()
    )


def load_campaign_metrics(session: Session, campaign: Campaign) -> CampaignMetrics:
    """Three queries whatever the campaign's size: which model metrics the campaign has, the trials that matter
    (per approach, its newest trial for each of those names and its best-throughput trials: correlated
    subqueries, each an index seek), then those trials' rows as columns."""
    assert campaign.id is not None
    m = Metric.__table__  # type: ignore[attr-defined]
    reported = session.execute(
        select(*[exists().where(m.c.campaign_id == campaign.id, m.c.name == name) for name in MODEL_METRICS])
    ).one()  # one index seek per name: the per-approach seeks below are only for names the campaign has
    names = [name for name, present in zip(MODEL_METRICS, reported, strict=True) if present]
    columns = [_newest_trial(campaign.id, name) for name in names]
    columns += [_best_trial(campaign.id, name) for name in MetricName.THROUGHPUT if name in names]
    found: Iterable[Sequence[int | None]] = (
        session.execute(select(*columns).where(Approach.campaign_id == campaign.id)) if columns else []
    )
    trial_ids = {t for row in found for t in row if t is not None}
    if campaign.baseline_trial_id is not None:
        trial_ids.add(campaign.baseline_trial_id)
    traces = campaign_traces(session, campaign.id)
    if not trial_ids:
        return CampaignMetrics([], traces)
    # By trial id alone, so that both databases read the trial index (with the campaign or the names in the
    # WHERE, SQLite reads the campaign's whole (campaign, name, ...) index instead); filtered here. Columns
    # through Core (no ORM row processing); tags as text, parsed once per distinct text (few tag sets repeat).
    rows = session.connection().execute(
        sa_select(  # typed for eight columns (sqlmodel's select stops at four)
            m.c.trial_id,
            m.c.approach_id,
            m.c.name,
            m.c.value,
            cast(m.c.tags, Text),
            m.c.seq,
            m.c.index,
            m.c.campaign_id,
        ).where(m.c.trial_id.in_(sorted(trial_ids)))
    )
    wanted = set(MODEL_METRICS)
    parsed: dict[str | None, dict[str, Any]] = {None: {}}

    def tags_of(text: str | None) -> dict[str, Any]:
        found = parsed.get(text)
        if found is None:
            found = parsed[text] = json.loads(text) or {}  # type: ignore[arg-type]
        return found

    return CampaignMetrics(
        (
            MetricRow(trial_id, approach_id, name, value, tags_of(tags), seq, index)
            for trial_id, approach_id, name, value, tags, seq, index, campaign_id in rows
            if campaign_id == campaign.id
            and name in wanted
            and (value >= 1 or name not in MetricName.ACCEPT_LENGTH)  # as _accept_filter
        ),
        traces,
    )


def _first_by_preference(rows: list[MetricRow], names: tuple[str, ...]) -> MetricRow | None:
    """The newest trial's metric, taking the best-ranked name within that trial."""
    if not rows:
        return None
    newest = max(m.trial_id for m in rows)
    same_trial = [m for m in rows if m.trial_id == newest]
    return min(same_trial, key=lambda m: (names.index(m.name), -m.seq, -m.index))


def _entered(campaign: Campaign, name: str) -> Input | None:
    value = getattr(campaign, name)
    if value is None:
        return None
    source = (campaign.input_sources or {}).get(name)
    return Input(float(value), f"entered: {source}" if source else "entered on the campaign")


def _from_metric(metric: MetricRow | None, what: str = "") -> Input | None:
    if metric is None:
        return None
    label = f"trial #{metric.trial_id} ({metric.name}{', ' + what if what else ''})"
    return Input(metric.value, label, metric.trial_id)


def _n_ar_candidates(campaign: Campaign, trace: StoredTrace | None) -> tuple[Input | None, ...]:
    """N_ar: a value typed on the campaign (one with a stated source, or not the field's default) wins, and its
    source says where a trace counts otherwise; a trace's count wins over the default nobody typed (the seed
    model's 122); then the default."""
    entered = _entered(campaign, "allreduces_per_verify")
    counted = trace.forward_n_ar if trace is not None else None
    if trace is None or counted is None:
        return (entered,)
    from_trace = Input(float(round(counted)), trace.label("allreduces per step"), trace.trial_id)
    if entered is None:
        return (from_trace,)
    default = ModelInputFields.model_fields["allreduces_per_verify"].default
    typed = entered.value != default or bool((campaign.input_sources or {}).get("allreduces_per_verify"))
    if not typed:
        if from_trace.value != entered.value:
            from_trace = replace(from_trace, source=f"{from_trace.source}; replaces the default {default}")
        return (from_trace,)
    if round(counted) != entered.value:
        entered = replace(entered, source=f"{entered.source}; trace #{trace.artifact_id} counts {counted:g}")
    return (entered,)


def _gpu(rows: list[MetricRow]) -> list[MetricRow]:
    return [m for m in rows if not m.cpu_floor]


def model_inputs(
    session: Session, campaign: Campaign, what_if: WhatIf | None = None, metrics: CampaignMetrics | None = None
) -> ModelInputs:
    """The campaign's model inputs with their sources, what-if values laid over them."""
    what_if = what_if or WhatIf()
    metrics = metrics if metrics is not None else load_campaign_metrics(session, campaign)

    def pick(name: str, *candidates: Input | None) -> Input:
        override = getattr(what_if, name)
        if override is not None:
            return Input(float(override), "what-if")
        return next((c for c in candidates if c is not None), Input(None))

    baseline_metric = None
    if campaign.baseline_trial_id is not None:
        baseline_metric = _first_by_preference(
            metrics.of_trial(campaign.baseline_trial_id, MetricName.THROUGHPUT), MetricName.THROUGHPUT
        )
    baseline = pick(
        "baseline_tok_s", _entered(campaign, "baseline_tok_s"), _from_metric(baseline_metric, "baseline trial")
    )
    if baseline.value:
        t_base = Input(
            t_base_ms(baseline.value), f"1000 / {baseline.value:g} tok/s ({baseline.source})", baseline.trial_id
        )
    else:
        decode = min(_gpu(metrics.newest(MetricName.DECODE_STEP_MS)), key=lambda m: m.value, default=None)
        t_base = _from_metric(decode, "synthetic plain decode step, the fastest measured") or Input(None)
    accept = pick(
        "accept_length",
        _entered(campaign, "accept_length"),
        _from_metric(_first_by_preference(metrics.newest(MetricName.ACCEPT_LENGTH), MetricName.ACCEPT_LENGTH)),
    )
    verify_tokens = int(what_if.verify_tokens or campaign.verify_tokens)
    compute_rows = _gpu(metrics.newest(MetricName.VERIFY_COMPUTE_MS))
    compute_metric = next((m for m in compute_rows if m.tags.get("tokens") == verify_tokens), None) or (
        compute_rows[0] if compute_rows else None
    )
    trace = metrics.forward_trace()
    draft_rows = _gpu(metrics.newest(MetricName.DRAFT_STEP_MS))
    draft_metric = next((m for m in draft_rows if m.tags.get("mode") == "graph"), None) or (
        draft_rows[0] if draft_rows else None
    )
    inputs = ModelInputs(
        baseline_tok_s=baseline,
        t_base=t_base,
        accept_length=accept,
        draft_steps=pick("draft_steps", _entered(campaign, "draft_steps")),
        draft_step_ms=pick(
            "draft_step_ms", _entered(campaign, "draft_step_ms"), _from_metric(draft_metric, "draft head")
        ),
        verify_compute_ms=pick(
            "verify_compute_ms",
            _entered(campaign, "verify_compute_ms"),
            _from_metric(compute_metric, "synthetic verify step"),
        ),
        allreduces_per_verify=pick("allreduces_per_verify", *_n_ar_candidates(campaign, trace)),
        verify_tokens=verify_tokens,
        hidden_size=campaign.hidden_size,
    )
    return replace(inputs, missing=tuple(_missing(inputs)))


def _missing(inputs: ModelInputs) -> list[Missing]:
    out = []
    if not inputs.t_base.value:
        out.append(
            Missing(
                "plain decode step T_base (baseline tok/s at batch 1, or a measured decode step)",
                "run an sglang_server trial without speculation and mark it the baseline trial, "
                "enter the baseline tok/s on the campaign, or run the verify_step recipe at 1 token "
                "on a GPU node (it reports decode_step_ms)",
            )
        )
    if inputs.allreduces_per_verify.value is None:
        out.append(
            Missing(
                "allreduces per verify step",
                "enter it on the campaign (2 per layer for tensor parallelism: 122 for 61 layers), or run the "
                "verify_step recipe with profile: true (its trace counts them)",
            )
        )
    if inputs.accept_length.value is None:
        out.append(
            Missing(
                "accept length (tau, incl. the bonus token)",
                "the one input that needs the real model: run an sglang_server trial with EAGLE-3 "
                "(--speculative-algorithm EAGLE3), or enter it on the campaign or in the what-if",
            )
        )
    if inputs.draft_steps.value is None or inputs.draft_step_ms.value is None:
        out.append(
            Missing(
                "draft cost (draft steps x ms per draft step)",
                "enter the draft steps (--speculative-num-steps; sglang picks 3 for DeepSeek-V3) "
                "and run the draft_step recipe on a GPU node, or enter the ms per draft step",
            )
        )
    if inputs.verify_compute_ms.value is None:
        out.append(
            Missing(
                "verify compute (ms per verify step, without communication)",
                "run a verify_step trial on a GPU node (it reports verify_compute_ms), or enter it",
            )
        )
    return out


# ---- allreduce latency per approach -----------------------------------------------------------


@dataclass(frozen=True)
class LatencyEstimate:
    """An approach's allreduce latency at the verify message size, and how it was obtained."""

    t_ar_us: float
    method: str  # measured | interpolated | nearest | in situ | trace | derived | reported
    note: str  # what a reader needs to trust it
    trial_id: int | None  # None: a reported figure


@dataclass(frozen=True)
class LatencyPoint:
    bytes: int
    latency_us: float
    trial_id: int
    tags: dict[str, Any] = field(default_factory=dict)


def _mode_rank(tags: dict[str, Any]) -> tuple[int, int]:
    # SGLang decodes under CUDA graphs, so a graphed measurement is the one that predicts serving.
    return (1 if tags.get("mode") == "graph" else 0, int(tags.get("world_size") or 0))


def allreduce_curve(metrics: list[MetricRow]) -> list[LatencyPoint]:
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
            return (
                value,
                "interpolated",
                (
                    f"interpolated (log-log) between {_size(lo.bytes)} and "
                    f"{_size(hi.bytes)}; not measured at {_size(nbytes)}"
                ),
            )
    nearest = min(curve, key=lambda p: abs(math.log(p.bytes) - math.log(nbytes)))
    return (
        nearest.latency_us,
        "nearest",
        (f"nearest measured size {_size(nearest.bytes)}; not measured at {_size(nbytes)}"),
    )


def _size(nbytes: int) -> str:
    return f"{nbytes / 1024:g} KiB" if nbytes % 1024 == 0 else f"{nbytes} B"


def approach_latency(metrics: CampaignMetrics, approach_id: int, inputs: ModelInputs) -> LatencyEstimate | None:
    """The approach's t_ar at the verify message size from GPU measurements, by the precedence in the
    module docstring (CPU-floor figures never count)."""
    curve = allreduce_curve(_gpu(metrics.newest(MetricName.ALLREDUCE_LATENCY_US, approach_id)))
    found = latency_at(curve, inputs.verify_bytes)
    if found:
        value, method, note = found
        tags = curve[0].tags
        how = ", ".join(
            f"{k} {tags[k]}" for k in ("backend", "mode", "method", "world_size") if tags.get(k) is not None
        )
        return LatencyEstimate(value, method, f"allreduce benchmark ({how}): {note}", curve[0].trial_id)

    in_situ = _gpu(metrics.newest(MetricName.ALLREDUCE_IN_SITU_US, approach_id))
    if in_situ:
        exact = [m for m in in_situ if m.tags.get("tokens") == inputs.verify_tokens]
        metric = (
            exact[0]
            if exact
            else min(
                in_situ,
                key=lambda m: abs(math.log(max(int(m.tags.get("tokens") or 1), 1)) - math.log(inputs.verify_tokens)),
            )
        )
        note = "in situ in a synthetic verify step"
        if not exact:
            note += f" at {metric.tags.get('tokens')} tokens (not {inputs.verify_tokens})"
        return LatencyEstimate(metric.value, "in situ", note, metric.trial_id)

    trace = metrics.approach_trace(approach_id)
    if trace is not None and trace.t_ar_us is not None:
        return LatencyEstimate(
            trace.t_ar_us,
            "trace",
            trace.label("mean allreduce kernel, at the profiled step's message size"),
            trace.trial_id,
        )

    return _derived_latency(metrics, approach_id, inputs)


def _derived_latency(metrics: CampaignMetrics, approach_id: int, inputs: ModelInputs) -> LatencyEstimate | None:
    """From a speculative sglang_server trial: cycle = TPOT x tau = T_draft + T_verify_compute + N_ar x t_ar."""
    costs = inputs.costs(tau=1.0)  # tau comes from the trial itself
    if costs is None or costs.n_ar <= 0:
        return None
    tau = _first_by_preference(metrics.newest(MetricName.ACCEPT_LENGTH, approach_id), MetricName.ACCEPT_LENGTH)
    if tau is None:
        return None
    timing = metrics.of_trial(tau.trial_id, (MetricName.MEDIAN_TPOT_MS, *MetricName.THROUGHPUT))
    tpot = next((m.value for m in timing if m.name == MetricName.MEDIAN_TPOT_MS), None)
    if tpot is None:
        tput = next((m.value for m in timing if m.name in MetricName.THROUGHPUT and m.value > 0), None)
        tpot = 1000.0 / tput if tput else None
    if tpot is None:
        return None
    comm_ms = tau.value * tpot - costs.draft_ms - costs.verify_compute_ms
    if comm_ms <= 0:
        return None
    return LatencyEstimate(
        comm_ms / costs.n_ar * 1000.0,
        "derived",
        f"derived from SGLang trial #{tau.trial_id}: TPOT {tpot:.2f} ms x accept length "
        f"{tau.value:.2f}, minus draft and verify compute, over {costs.n_ar} allreduces",
        tau.trial_id,
    )


# ---- figures reported elsewhere ---------------------------------------------------------------


@dataclass(frozen=True)
class ReferencePoint:
    """A reported figure on the chart: an approach placed where its source says it would be."""

    label: str
    approach_key: str | None
    latency: LatencyEstimate
    tau_star: float | None
    baseline: bool
    bytes: int | None  # the message size a reported t_ar was measured at, if the source says


def reported_latencies(campaign: Campaign, inputs: ModelInputs) -> list[tuple[dict[str, Any], LatencyEstimate]]:
    """The campaign's reported figures as t_ar estimates. A plain-decode tok/s becomes a t_ar against the
    baseline's reported t_ar: t_ar = t_ar(baseline) + (1000 / tok/s - T_base) / N_ar."""
    figures = campaign.reported or []
    base = next((f for f in figures if f.get("baseline") and f.get("t_ar_us")), None)
    n_ar = inputs.allreduces_per_verify.value
    out = []
    for f in figures:
        if f.get("t_ar_us"):
            size = f" at {_size(int(f['bytes']))}" if f.get("bytes") else ""
            out.append((f, LatencyEstimate(float(f["t_ar_us"]), "reported", f"reported{size}: {f['source']}", None)))
        elif f.get("tok_s") and base and inputs.t_base.value and n_ar:
            step_ms = 1000.0 / float(f["tok_s"])
            t_ar = float(base["t_ar_us"]) + (step_ms - inputs.t_base.value) / n_ar * 1000.0
            if t_ar > 0:
                out.append(
                    (
                        f,
                        LatencyEstimate(
                            t_ar,
                            "derived",
                            (
                                f"derived from a reported {f['tok_s']:g} tok/s plain decode ({f['source']}): "
                                f"{base['t_ar_us']:g} us + ({step_ms:.2f} - {inputs.t_base.value:.2f}) ms over {int(n_ar)} "
                                f"allreduces"
                            ),
                            None,
                        ),
                    )
                )
    return out


# ---- the report -----------------------------------------------------------------------------


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
    tau: float | None  # its own accept length, else the campaign's, else None
    tau_source: str
    comm_ms: float
    savings_ms: float | None  # None while the full costs are unknown
    speedup: float | None

    @property
    def profitable(self) -> bool | None:
        return None if self.savings_ms is None else self.comm_ms < self.savings_ms

    @property
    def break_even_tau(self) -> float | None:
        return self.tau_star


@dataclass(frozen=True)
class CpuFloor:
    """A CPU or scaled-down figure of an approach: shown, never fed to the model."""

    title: str
    name: str
    value: float
    unit: str
    trial_id: int


@dataclass(frozen=True)
class Answer:
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

    @property
    def t_ar_us(self) -> float:
        return self.latency.t_ar_us

    @property
    def profitable(self) -> bool | None:
        """S > 1 iff tau > tau*; None while the accept length, or (above a lower bound) a cost, is unknown."""
        if self.tau is None:
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
        return self.margin * self.t_base_ms if self.margin is not None and self.exact else None

    @property
    def speedup(self) -> float | None:
        """S = tau / tau* (= tau x T_base / cycle time); only with every cost known."""
        return self.tau / self.tau_star if self.tau is not None and self.exact and self.tau_star > 0 else None

    @property
    def usable(self) -> bool:
        return self.status != ApproachStatus.dead_end


def answers_for(
    curve: BreakEvenCurve | None,
    points: Iterable[ApproachPoint],
    references: Iterable[ReferencePoint],
    accept: Input,
    statuses: dict[str, str],
) -> tuple[Answer, ...]:
    """Every measured approach and reported figure answered against the break-even curve, lowest tau* first
    (none without the curve). A reported figure is answered with the campaign's accept length."""
    if curve is None:
        return ()
    found = curve

    def answer(
        label: str,
        key: str | None,
        status: str | None,
        latency: LatencyEstimate,
        measured: bool,
        baseline: bool,
        tau: float | None,
        tau_source: str,
    ) -> Answer:
        return Answer(
            label=label,
            approach_key=key,
            status=status,
            latency=latency,
            measured=measured,
            baseline=baseline,
            tau=tau,
            tau_source=tau_source,
            tau_star=found.tau_star(latency.t_ar_us),
            contains=found.contains,
            exact=not found.lower_bound,
            t_base_ms=found.t_base_ms,
        )

    out = [answer(p.title, p.key, p.status, p.latency, True, False, p.tau, p.tau_source) for p in points]
    out += [
        answer(
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
    return tuple(sorted(out, key=lambda a: a.tau_star))


@dataclass(frozen=True)
class ProfitabilityReport:
    inputs: ModelInputs
    curve: BreakEvenCurve | None
    costs: CycleCosts | None
    points: tuple[ApproachPoint, ...]
    references: tuple[ReferencePoint, ...]
    cpu_floor: tuple[CpuFloor, ...]
    unmeasured: tuple[str, ...]  # approach titles without a t_ar at the verify size
    speculative: bool  # does the campaign ask the speculation question (see asks_speculation)
    answers: tuple[Answer, ...] = ()  # every approach and reported figure, lowest tau* first

    @property
    def headline(self) -> Answer | None:
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

    def answer_of(self, item: ApproachPoint | ReferencePoint) -> Answer | None:
        """The answer for one row of the points or the reported table."""
        if isinstance(item, ApproachPoint):
            return next((a for a in self.answers if a.measured and a.approach_key == item.key), None)
        return next((a for a in self.answers if not a.measured and a.label == item.label), None)

    @property
    def others(self) -> tuple[Answer, ...]:
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
        return min(self.points, key=lambda p: p.latency.t_ar_us, default=None)

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
        t_ars = [p.latency.t_ar_us for p in self.points] or [r.latency.t_ar_us for r in self.references]
        if not t_ars:
            return None
        t_ar = min(t_ars)
        return self.curve.n_ar * t_ar / 1000.0 / self.curve.t_base_ms, t_ar


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


def profitability_report(
    session: Session,
    campaign: Campaign,
    what_if: WhatIf | None = None,
    *,
    metrics: CampaignMetrics | None = None,
    approach_rows: list[Approach] | None = None,
) -> ProfitabilityReport:
    """Every approach with a t_ar at the verify message size, evaluated against the campaign's inputs.
    Pass `metrics` and `approach_rows` already read to compute a what-if without reading again."""
    metrics = metrics if metrics is not None else load_campaign_metrics(session, campaign)
    rows = approach_rows if approach_rows is not None else approaches(session, campaign)
    inputs = model_inputs(session, campaign, what_if, metrics)
    curve = inputs.curve()
    costs = inputs.costs()
    own_tau_allowed = not (what_if and what_if.accept_length is not None)
    points: list[ApproachPoint] = []
    unmeasured: list[str] = []
    for approach in rows:
        assert approach.id is not None  # read from the database
        estimate = approach_latency(metrics, approach.id, inputs)
        if estimate is None:
            unmeasured.append(approach.title)
            continue
        own = (
            _from_metric(
                _first_by_preference(metrics.newest(MetricName.ACCEPT_LENGTH, approach.id), MetricName.ACCEPT_LENGTH)
            )
            if own_tau_allowed
            else None
        )
        tau = own.value if own else inputs.accept_length.value
        mine = inputs.costs(tau=tau) if tau is not None else None
        n_ar = int(inputs.allreduces_per_verify.value or 0)
        points.append(
            ApproachPoint(
                approach_id=approach.id,
                key=approach.key,
                title=approach.title,
                status=approach.status,
                reason=approach.reason,
                stack=stack_summary(approach.verdict_fingerprint),
                latency=estimate,
                tau_star=curve.tau_star(estimate.t_ar_us) if curve else None,
                tau=tau,
                tau_source=(own.source if own else inputs.accept_length.source),
                comm_ms=n_ar * estimate.t_ar_us / 1000.0,
                savings_ms=mine.savings_ms if mine else None,
                speedup=mine.speedup(estimate.t_ar_us) if mine else None,
            )
        )
    titles = {a.key: a.title for a in rows}
    references = tuple(
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
    by_id = {a.id: a.title for a in rows}
    floor = tuple(
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
    )


# ---- measurements for the charts ------------------------------------------------------------


@dataclass(frozen=True)
class LatencySeries:
    approach_title: str
    status: str
    points: tuple[LatencyPoint, ...]
    cpu_floor: bool = False


def latency_series(metrics: CampaignMetrics, approach_rows: list[Approach]) -> list[LatencySeries]:
    """Each approach's allreduce latency-vs-size curve (newest trial, preferred mode); CPU ones flagged."""
    by_approach: dict[int, list[MetricRow]] = defaultdict(list)
    for m in metrics.newest(MetricName.ALLREDUCE_LATENCY_US):
        by_approach[m.approach_id].append(m)
    out = []
    for approach in approach_rows:
        curve = allreduce_curve(by_approach.get(approach.id, []))  # type: ignore[arg-type]
        if curve:
            out.append(
                LatencySeries(
                    approach.title, approach.status, tuple(curve), cpu_floor=any(is_cpu_floor(p.tags) for p in curve)
                )
            )
    return out


@dataclass(frozen=True)
class ThroughputRow:
    approach_title: str
    status: str
    reason: str
    tok_s: float | None  # None: never measured
    trial_id: int | None
    speculative: bool


def throughput_rows(metrics: CampaignMetrics, approach_rows: list[Approach]) -> list[ThroughputRow]:
    """Each approach's best measured decode throughput (None when it has none), in priority order; the
    benchmark's figure is preferred to the decode-log one."""
    speculative_trials = {m.trial_id for m in metrics.all(MetricName.ACCEPT_LENGTH)}
    best: dict[int, MetricRow] = {}
    for m in metrics.all(MetricName.THROUGHPUT):
        rank = (-MetricName.THROUGHPUT.index(m.name), m.value)
        have = best.get(m.approach_id)
        if have is None or rank > (-MetricName.THROUGHPUT.index(have.name), have.value):
            best[m.approach_id] = m
    out = []
    for approach in approach_rows:
        row = best.get(approach.id)  # type: ignore[arg-type]
        out.append(
            ThroughputRow(
                approach.title,
                approach.status,
                approach.reason,
                row.value if row else None,
                row.trial_id if row else None,
                bool(row and row.trial_id in speculative_trials),
            )
        )
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
