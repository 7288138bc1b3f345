"""The campaign's answer, one home: is speculation profitable, up to which batch, with how many draft tokens.

`read_answer(session, campaign, AnswerQuery(conditions, what_if, t_ar_us))` (read.py) is the one call every reader
makes: every what-if, the what-if t_ar too, is laid over the answer there, inside its one cache.
One idea a module:
    values.py   the vocabulary: Conditions (tags + stack), Value (one input: trials, spread, source, conditions),
                Missing (what, under which conditions, which trial would measure it)
    loader.py   the one loader of the batch model's inputs, paired only under the same conditions
    grid.py     the grid's vocabulary: its inputs per approach, cells, intervals, tiers and the answer's types
    cells.py    the cells over (batch, draft tokens) and their trial-level intervals (bootstrap, paired runs)
    tiers.py    the tiers and B*: which approach is chosen, which are indistinguishable from it
    missing.py  what the grid lacks, under which conditions, and the trial that would measure it
    sentence.py the answer's sentence and headline, by batch range
    speculation.py  speculation_answer: the answer over the grid composed from those parts; answer_json
    query.py    AnswerQuery: the condition set, the what-if and the what-if t_ar a reader asks for
    read.py     read_answer, its Answer and its one bounded cache, keyed by the query and the data version
    model.py    the break-even math: T_base, the cycle costs, the break-even curve tau*(t_ar), Leviathan's speedup
    metrics.py  the campaign's metrics the model reads, loaded in one pass; CPU floors and world figures
    inputs.py   the model's inputs with their sources (entered, measured, what-if) and what is missing
    latency.py  each approach's allreduce latency at the verify message size, and reported figures
    report.py   the report: every approach against the curve, and the answers it gives
    series.py   the measurements the charts draw beside the model
    configs/    each engine's launch settings for the answer (SGLang, vLLM, TensorRT-LLM), checked by its rules
The names are re-exported here: `from app.domain.answer import X` is the way in. The batch-1 report (report.py)
is the answer at batch 1: `Answer.report` reads the grid's batch-1 inputs (read.at_batch_1) and each approach's
grid cell there (`ApproachPoint.cell`, its intervals); its break-even curve over t_ar stays, for reported figures.
"""

from app.domain.answer.inputs import ModelInputs, WhatIf, model_inputs
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
from app.domain.answer.query import AnswerQuery
from app.domain.answer.read import Answer, read_answer
from app.domain.answer.report import (
    NO_ALLREDUCES,
    ApproachBreakEven,
    ApproachPoint,
    CpuFloor,
    ProfitabilityReport,
    answers_for,
    asks_speculation,
    profitability_report,
    with_allreduce_latency,
)
from app.domain.answer.series import LatencySeries, ThroughputRow, latency_series, stack_summary, throughput_rows
from app.domain.answer.values import Conditions, Input, Missing, Value

__all__ = [
    "read_answer",
    "AnswerQuery",
    "Answer",
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
    "Value",
    "Conditions",
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
    "ApproachBreakEven",
    "answers_for",
    "ProfitabilityReport",
    "NO_ALLREDUCES",
    "asks_speculation",
    "profitability_report",
    "with_allreduce_latency",
    "LatencySeries",
    "latency_series",
    "ThroughputRow",
    "throughput_rows",
    "stack_summary",
]
