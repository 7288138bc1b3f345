"""What-if values that are not campaign inputs: an allreduce latency t_ar tried in place of every measured
and reported one (issue 32 item 8). Computing with it stores nothing; the page says it is in use.

The report is recomputed from the profitability model's own pieces (`answers_for`): the what-if t_ar becomes
the one figure the headline is answered with, and the measured points step aside (their latencies are what
it replaces). No FastAPI here.
"""

from __future__ import annotations

from dataclasses import replace

from app.domain.answer import LatencyEstimate, ProfitabilityReport, ReferencePoint, answers_for

T_AR_LABEL = "what-if t_ar"


def with_allreduce_latency(report: ProfitabilityReport, t_ar_us: float) -> ProfitabilityReport:
    """The report answered with `t_ar_us` per allreduce in place of the measured curve."""
    curve = report.curve
    latency = LatencyEstimate(
        t_ar_us, "what-if", "entered in the what-if: used in place of the measured and reported latencies", None
    )
    mine = ReferencePoint(T_AR_LABEL, None, latency, curve.tau_star(t_ar_us) if curve else None, True, None)
    references = (mine, *(replace(r, baseline=False) for r in report.references))
    answers = answers_for(curve, (), references, report.inputs.accept_length, {})
    return replace(report, points=(), references=references, answers=answers)
