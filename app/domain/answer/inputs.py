"""The model's inputs and where each comes from (first that exists wins; `docs/profitability.md` says the same):
    baseline tok/s    campaign.baseline_tok_s, else the baseline trial's output throughput
    T_base            1000 / baseline tok/s, else the fastest GPU `decode_step_ms` (synthetic plain decode step)
    accept length     campaign.accept_length, else the newest accept-length metric of any trial
                      (bench `accept_length` > `/server_info` > decode log lines); an approach's own
                      speculative trial gives that approach's point its own tau
    draft cost        campaign.draft_steps x (campaign.draft_step_ms, else the newest GPU `draft_step_ms`)
    verify compute    campaign.verify_compute_ms, else the newest GPU verify_step `verify_compute_ms`
    allreduces        campaign.allreduces_per_verify when typed, else a stored profiler trace's allreduces per
                      verify or decode step ("from trace #id": device kernels first; a CPU trace's count only
                      when its trial measured the full geometry), else the field's default
A what-if (`WhatIf`) lays values over them without storing anything.
A missing input is reported as a `Missing` (what, and how to get it) instead of being guessed; every value is
the answer's one `Value` (values.py; `Input` is its name here).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlmodel import Session

from app.domain.answer.metrics import CampaignMetrics, MetricRow, load_campaign_metrics
from app.domain.answer.model import BYTES_PER_ELEMENT, BreakEvenCurve, CycleCosts, t_base_ms
from app.domain.answer.values import Input, Missing
from app.domain.traces import StoredTrace
from app.models import Campaign, ModelInputFields
from app.protocol.metrics import MetricName


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

    def __hash__(self) -> int:  # an AnswerQuery (query.py) is a cache key
        return hash(frozenset(self.values.items()))

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
    entered_accept = _entered(campaign, "accept_length")
    measured_accept = _from_metric(
        _first_by_preference(metrics.newest(MetricName.ACCEPT_LENGTH), MetricName.ACCEPT_LENGTH)
    )
    if entered_accept is not None and measured_accept is not None:  # typed wins; say the measurement exists
        entered_accept = replace(
            entered_accept,
            source=f"{entered_accept.source}; used in place of the measured {measured_accept.value:.3g} "
            f"({measured_accept.source}): an entered acceptance takes precedence, clear it to use the measurement",
        )
    accept = pick("accept_length", entered_accept, measured_accept)
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
    return replace(inputs, missing=tuple(batch_1_missing(inputs)))


def batch_1_missing(inputs: ModelInputs) -> list[Missing]:
    """What the batch-1 model lacks, and how to measure it."""
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
