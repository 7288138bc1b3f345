"""Is speculation profitable? The model in shared/domain.md and where its inputs come from.

One idea a module:
    model.py    the break-even math: T_base, the cycle costs, the break-even curve tau*(t_ar), Leviathan's speedup
    metrics.py  the campaign's metrics the model reads, loaded in one pass; CPU floors and world figures
    inputs.py   the model's inputs with their sources (entered, measured, what-if) and what is missing
    latency.py  each approach's allreduce latency at the verify message size, and reported figures
    report.py   the report: every approach against the curve, and the answers it gives
    series.py   the measurements the charts draw beside the model
The names are re-exported here: `from app.domain.answer import X` is the way in.
"""

from app.domain.answer.inputs import Input, Missing, ModelInputs, WhatIf, model_inputs
from app.domain.answer.latency import (
    LatencyEstimate,
    LatencyPoint,
    ReferencePoint,
    allreduce_curve,
    approach_latency,
    latency_at,
    reported_latencies,
)
from app.domain.answer.metrics import (
    MODEL_METRICS,
    CampaignMetrics,
    MetricRow,
    is_cpu_floor,
    is_world_figure,
    load_campaign_metrics,
)
from app.domain.answer.model import (
    BYTES_PER_ELEMENT,
    BreakEvenCurve,
    CycleCosts,
    leviathan_expected_tokens,
    leviathan_speedup,
    t_base_ms,
)
from app.domain.answer.report import (
    Answer,
    ApproachPoint,
    CpuFloor,
    ProfitabilityReport,
    answers_for,
    asks_speculation,
    profitability_report,
)
from app.domain.answer.series import LatencySeries, ThroughputRow, latency_series, stack_summary, throughput_rows

__all__ = [
    "BYTES_PER_ELEMENT",
    "t_base_ms",
    "leviathan_expected_tokens",
    "leviathan_speedup",
    "CycleCosts",
    "BreakEvenCurve",
    "MODEL_METRICS",
    "is_cpu_floor",
    "is_world_figure",
    "MetricRow",
    "CampaignMetrics",
    "load_campaign_metrics",
    "Missing",
    "Input",
    "WhatIf",
    "ModelInputs",
    "model_inputs",
    "LatencyEstimate",
    "LatencyPoint",
    "allreduce_curve",
    "latency_at",
    "approach_latency",
    "ReferencePoint",
    "reported_latencies",
    "ApproachPoint",
    "CpuFloor",
    "Answer",
    "answers_for",
    "ProfitabilityReport",
    "asks_speculation",
    "profitability_report",
    "LatencySeries",
    "latency_series",
    "ThroughputRow",
    "throughput_rows",
    "stack_summary",
]
