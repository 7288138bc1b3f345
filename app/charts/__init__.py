"""Plotly figure builders: domain data in, a figure out as a plain dict in Plotly's JSON schema (no database,
no web). `base` holds what every figure shares (font, palettes, template, trace/axis/layout/figure builders);
each other module is one family of figures. The page embeds a figure as JSON and static/charts.js draws it
with the vendored plotly.js bundle (app/templating.py). Callers import the builders from here.
"""

from app.charts.base import MAX_TRACES, STATUS_COLORS, TRIAL_COLORS, Figure, escape
from app.charts.changes import series_with_changes
from app.charts.comparison import trial_comparison
from app.charts.profitability import (
    MAX_LABELS,
    allreduce_latency_vs_size,
    break_even_accept_length,
    latency_comparison,
    verify_comm_vs_savings,
)
from app.charts.speculation import break_even_batches, speedup_heatmap, speedup_vs_batch
from app.charts.throughput import ReportedRate, reported_rates, throughput_vs_baseline
from app.charts.timeline import campaign_timeline

__all__ = [
    "MAX_LABELS",
    "MAX_TRACES",
    "STATUS_COLORS",
    "TRIAL_COLORS",
    "Figure",
    "ReportedRate",
    "allreduce_latency_vs_size",
    "break_even_accept_length",
    "break_even_batches",
    "campaign_timeline",
    "escape",
    "latency_comparison",
    "reported_rates",
    "series_with_changes",
    "speedup_heatmap",
    "speedup_vs_batch",
    "throughput_vs_baseline",
    "trial_comparison",
    "verify_comm_vs_savings",
]
