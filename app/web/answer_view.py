"""What the charts page and the share status page draw of the answer: its figures, the answer over (batch, draft
tokens) with its charts, and the Deploy panel. Both pages read the same `Answer` (`read_answer`); nothing here
changes it.

A page shown again with nothing new gets the same `Answer` object from `read_answer` (its cache, keyed by the query
and the campaign's data version), so what is drawn of it is kept with it (`_drawn`): built once per answer, not once
per request.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from jinja2.utils import htmlsafe_json_dumps
from markupsafe import Markup
from sqlmodel import Session

from app import charts
from app.domain.answer import Answer, latency_series, throughput_rows
from app.domain.answer.configs import (
    ENGINE_LABELS,
    ENGINES,
    DeployTarget,
    EngineConfig,
    ServeRange,
    deploy_target,
    engine_config,
    parse_serve_range,
)
from app.domain.answer.grid import SpeculationAnswer
from app.domain.errors import Conflict, Invalid
from app.models import Campaign

T = TypeVar("T")

# Drawings kept per answer (Answer.drawn): the seven of a page, and room for other served ranges and nodes of the
# Deploy panel; the least recently used goes first.
_DRAWN_PER_ANSWER = 24
_DRAWN_LOCK = threading.Lock()


def _drawn(answer: Answer, what: str, draw: Callable[[], T]) -> T:
    """`draw()` of `answer`, drawn once per answer (the module docstring): kept on the answer itself, so a drawing
    lives as long as the answer's entry in read_answer's bounded cache. Readers never change what it returns."""
    with _DRAWN_LOCK:
        if what in answer.drawn:
            answer.drawn.move_to_end(what)
            return cast(T, answer.drawn[what])
    drawn = draw()
    with _DRAWN_LOCK:
        answer.drawn[what] = drawn
        while len(answer.drawn) > _DRAWN_PER_ANSWER:
            answer.drawn.popitem(last=False)
    return drawn


def answer_figures(answer: Answer) -> dict[str, Any]:
    """The figures that depend on the model's inputs (the what-if partial re-plots these)."""
    return dict(_drawn(answer, "answer figures", lambda: _answer_figures(answer)))


def answer_figures_json(answer: Answer) -> dict[str, Markup]:
    """`answer_figures` as the pages embed them, serialised once per answer (the largest part of the page)."""
    return _drawn(answer, "answer figures json", lambda: {k: figure_json(f) for k, f in answer_figures(answer).items()})


def figure_json(figure: dict[str, Any] | None) -> Markup:
    """A figure as a page embeds it in `<script type="application/json">`: the text of Jinja's `tojson`."""
    return htmlsafe_json_dumps(figure, sort_keys=True)


def _answer_figures(answer: Answer) -> dict[str, Any]:
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
    baseline line alone across empty rows says nothing (no empty axes). The campaign's reported figures are part
    of the answer's key (its data version holds every campaign column), so it is drawn once per answer too."""
    return _drawn(answer, "throughput", lambda: _throughput_figure(answer, campaign))


def throughput_figure_json(answer: Answer, campaign: Campaign) -> Markup:
    """`throughput_figure` as the pages embed it, serialised once per answer."""
    return _drawn(answer, "throughput json", lambda: figure_json(throughput_figure(answer, campaign)))


def _throughput_figure(answer: Answer, campaign: Campaign) -> dict[str, Any] | None:
    rows = throughput_rows(answer.metrics, answer.approaches)
    reported = charts.reported_rates(campaign.reported, {a.key: a.title for a in answer.approaches})
    baseline = answer.report.inputs.baseline_tok_s.value
    if not reported and all(r.tok_s is None and r.status != "dead_end" for r in rows):
        return None
    return charts.throughput_vs_baseline(rows, baseline, reported)


def _speculation_charts(found: SpeculationAnswer) -> dict[str, Any]:
    return {
        "speedup": charts.speedup_vs_batch(found),
        "heatmap": charts.speedup_heatmap(found),
        "break_even": charts.break_even_batches(found),
    }


@dataclass(frozen=True)
class DeployOption:
    """One engine's launch settings for the decision, or why there are none yet."""

    engine: str
    label: str
    config: EngineConfig | None
    error: str


def deploy_options(session: Session, answer: Answer, serve_batches: str | None = None) -> dict[str, Any]:
    """Context of `_partials/deploy.html`: each engine's config for the served range, or why there is none; drawn
    once per answer, served range and target node (the node is read each time: a trial's fingerprint is not in
    the answer's key)."""
    try:
        serve = parse_serve_range(serve_batches)
        serve_error = ""
    except Invalid as exc:
        serve, serve_error = parse_serve_range(None), exc.message
    target = deploy_target(session, answer.speculation, answer.approaches)
    deploy = _drawn(answer, f"deploy {serve!r} {target!r}", lambda: _deploy(answer, serve, target))
    return {"deploy": deploy, "serve_batches": str(serve), "serve_error": serve_error}


def _deploy(answer: Answer, serve: ServeRange, target: DeployTarget) -> list[DeployOption]:
    deploy = []
    for engine in ENGINES:
        try:
            config = engine_config(engine, answer.speculation, answer.approaches, serve=serve, target=target)
            deploy.append(DeployOption(engine, ENGINE_LABELS[engine], config, ""))
        except Conflict as exc:  # no decision to deploy yet: the panel says why
            deploy.append(DeployOption(engine, ENGINE_LABELS[engine], None, exc.message))
    return deploy


def speculation_context(
    session: Session,
    campaign: Campaign,
    answer: Answer,
    serve_batches: str | None = None,
    *,
    read_only: bool = False,
) -> dict[str, Any]:
    """Context of `_partials/speculation.html`: the answer over (batch, draft tokens) under its condition set (the
    set select), its charts (and their JSON, serialised once per answer) and the Deploy panel."""
    found = answer.speculation
    figures = _drawn(answer, "speculation charts", lambda: _speculation_charts(found))
    return {
        "speculation": found,
        "answer": answer,
        "read_only": read_only,
        "speculation_charts": figures,
        "speculation_charts_json": _drawn(
            answer, "speculation charts json", lambda: {k: figure_json(f) for k, f in figures.items()}
        ),
        **deploy_options(session, answer, serve_batches),
    }
