"""What the charts page and the share status page draw of the answer: its figures, the answer over (batch, draft
tokens) with its charts, and the Deploy panel. Both pages read the same `Answer` (`read_answer`); nothing here
changes it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlmodel import Session

from app import charts
from app.domain.answer import Answer, latency_series, throughput_rows
from app.domain.answer.configs import (
    ENGINE_LABELS,
    ENGINES,
    EngineConfig,
    deploy_target,
    engine_config,
    parse_serve_range,
)
from app.domain.answer.grid import SpeculationAnswer
from app.domain.errors import Conflict, Invalid
from app.models import Approach, Campaign


def answer_figures(answer: Answer) -> dict[str, Any]:
    """The figures that depend on the model's inputs (the what-if partial re-plots these)."""
    report = answer.report
    return {
        "chart_break_even": charts.break_even_accept_length(report) if report.speculative else None,
        "chart_verify": charts.verify_comm_vs_savings(report),
        "chart_comparison": None if report.speculative else charts.latency_comparison(report),
        "chart_latency": charts.allreduce_latency_vs_size(
            latency_series(answer.metrics, answer.approaches), report.inputs.verify_bytes, report.references
        ),
    }


def throughput_figure(answer: Answer, campaign: Campaign) -> dict[str, Any] | None:
    """Chart 3, or None while no approach has a measured or reported throughput or a dead end to mark: a
    baseline line alone across empty rows says nothing (no empty axes)."""
    rows = throughput_rows(answer.metrics, answer.approaches)
    reported = charts.reported_rates(campaign.reported, {a.key: a.title for a in answer.approaches})
    baseline = answer.report.inputs.baseline_tok_s.value
    if not reported and all(r.tok_s is None and r.status != "dead_end" for r in rows):
        return None
    return charts.throughput_vs_baseline(rows, baseline, reported)


@dataclass(frozen=True)
class DeployOption:
    """One engine's launch settings for the decision, or why there are none yet."""

    engine: str
    label: str
    config: EngineConfig | None
    error: str


def deploy_options(
    session: Session, found: SpeculationAnswer, approaches: list[Approach], serve_batches: str | None = None
) -> dict[str, Any]:
    """Context of `_partials/deploy.html`: each engine's config for the served range, or why there is none."""
    try:
        serve = parse_serve_range(serve_batches)
        serve_error = ""
    except Invalid as exc:
        serve, serve_error = parse_serve_range(None), exc.message
    target = deploy_target(session, found, approaches)
    deploy = []
    for engine in ENGINES:
        try:
            config = engine_config(engine, found, approaches, serve=serve, target=target)
            deploy.append(DeployOption(engine, ENGINE_LABELS[engine], config, ""))
        except Conflict as exc:  # no decision to deploy yet: the panel says why
            deploy.append(DeployOption(engine, ENGINE_LABELS[engine], None, exc.message))
    return {"deploy": deploy, "serve_batches": str(serve), "serve_error": serve_error}


def speculation_context(
    session: Session,
    campaign: Campaign,
    answer: Answer,
    serve_batches: str | None = None,
    *,
    read_only: bool = False,
) -> dict[str, Any]:
    """Context of `_partials/speculation.html`: the answer over (batch, draft tokens) under its condition set (the
    set select), its charts and the Deploy panel."""
    found = answer.speculation
    return {
        "speculation": found,
        "answer": answer,
        "read_only": read_only,
        "speculation_charts": {
            "speedup": charts.speedup_vs_batch(found),
            "heatmap": charts.speedup_heatmap(found),
            "break_even": charts.break_even_batches(found),
        },
        **deploy_options(session, found, answer.approaches, serve_batches),
    }
