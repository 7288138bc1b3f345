"""Each approach's allreduce latency t_ar at the verify message size, and how it was obtained:
    1. allreduce recipe `allreduce_latency_us` at the verify message size
       (tokens x hidden x 2 bytes): exact size, else log-log interpolation between
       the sizes around it, else the nearest size (said so)
    2. verify_step recipe `allreduce_in_situ_us` (communication inside a real step)
    3. the mean allreduce kernel of the approach's newest device trace ("from trace #id": in situ, at the
       profiled step's message size)
    4. derived from an sglang_server speculative trial: its TPOT x accept length is
       the cycle time, minus draft and verify compute, over N_ar
Reported figures (campaign.reported): a figure from elsewhere (with its source) places an approach on
the chart until it is measured; a plain-decode tok/s is turned into a t_ar against the baseline's
reported t_ar.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from app.domain.answer.inputs import ModelInputs, _first_by_preference, _gpu
from app.domain.answer.metrics import CampaignMetrics, MetricRow
from app.domain.units import size_label
from app.models import Campaign
from app.protocol.metrics import MetricName


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
            return p.latency_us, "measured", f"measured at {size_label(nbytes)}"
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
                    f"interpolated (log-log) between {size_label(lo.bytes)} and "
                    f"{size_label(hi.bytes)}; not measured at {size_label(nbytes)}"
                ),
            )
    nearest = min(curve, key=lambda p: abs(math.log(p.bytes) - math.log(nbytes)))
    return (
        nearest.latency_us,
        "nearest",
        (f"nearest measured size {size_label(nearest.bytes)}; not measured at {size_label(nbytes)}"),
    )


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
            size = f" at {size_label(int(f['bytes']))}" if f.get("bytes") else ""
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
