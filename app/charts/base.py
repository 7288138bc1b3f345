"""What every figure shares: the font, the palettes, the Plotly template and the trace, axis, layout and
figure builders. A figure is a plain dict in Plotly's JSON schema (no `plotly.graph_objects`: its validation
was most of the charts page's server time).

Every builder of the package has one shape: traces from `scatter`/`bar`/`heatmap`, axes from `axis(title,
...)`, then `figure(traces, layout(title, subtitle, xaxis=..., yaxis=...))`, which adds the template. The
dicts follow plotly.js's attribute names exactly (nested, no `title_text` magic underscores);
tests/charts/test_chart_schema.py validates every builder's output against Plotly's schema.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from html import escape as _html_escape
from typing import Any

import plotly.io as pio

# A message size as the model's notes say it (56 KiB): the one formatter, so axis and notes agree.
from app.domain.units import size_label as size
from app.templating import STATUS_COLORS, STATUS_LABELS

Figure = dict[str, Any]

FONT = {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 13}
BREAK_EVEN_COLOR = "#5f6368"
REPORTED_COLOR = "#1a73e8"
# One colour per compared trial or drawn approach, in order: the same in every figure and in the page's
# table headers (the compare page colours its columns with it).
TRIAL_COLORS = ["#2563eb", "#d97706", "#059669", "#dc2626", "#7c3aed", "#0891b2", "#db2777", "#4b5563"]
CATEGORY_LABEL = 28  # characters of a category label (an approach's title) on an axis
# Past this many approaches a chart draws one trace per status instead of one per approach: the legend
# stays readable and building the figure costs per status, not per approach (issue 12).
MAX_TRACES = 30

__all__ = [
    "BREAK_EVEN_COLOR",
    "CATEGORY_LABEL",
    "FONT",
    "MAX_TRACES",
    "REPORTED_COLOR",
    "STATUS_COLORS",
    "TRIAL_COLORS",
    "Figure",
    "axis",
    "bar",
    "category_axis",
    "escape",
    "figure",
    "heatmap",
    "layout",
    "log_axis",
    "log_range",
    "rgba",
    "scatter",
    "short",
    "size",
    "spans_decades",
    "status_color",
    "status_label",
    "template",
    "trace",
    "trace_groups",
    "us",
]


def status_label(status: str) -> str:
    return "CPU floor" if status == "cpu_floor" else STATUS_LABELS.get(status, status)


def status_color(status: str) -> str:
    """A status's colour: the page's badge colour (static/app.css, read once by app.templating)."""
    return STATUS_COLORS.get(status, "#000")


def rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def escape(text: str) -> str:
    """Plotly draws a subset of HTML in names, titles and labels: data text is escaped (quotes need not be)."""
    return _html_escape(str(text), quote=False)


def short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def us(value: float) -> str:
    """A latency as a reader writes it: 6.5 us, 38 us, 1,819 us (never 1.82e+03)."""
    return f"{value:,.0f} us" if value >= 100 else f"{value:.1f} us"


def trace(kind: str, **attributes: Any) -> dict[str, Any]:
    """A trace of `kind` ("scatter", "bar", "heatmap": what the vendored bundle draws)."""
    return {"type": kind, **attributes}


def scatter(**attributes: Any) -> dict[str, Any]:
    return trace("scatter", **attributes)


def bar(**attributes: Any) -> dict[str, Any]:
    return trace("bar", **attributes)


def heatmap(**attributes: Any) -> dict[str, Any]:
    return trace("heatmap", **attributes)


def axis(title: str, **attributes: Any) -> dict[str, Any]:
    """An axis with its title; automargin keeps tick labels and the title inside the figure at any width."""
    return {"title": {"text": title, "standoff": 8}, "automargin": True, **attributes}


def category_axis(categories: list[str], **attributes: Any) -> dict[str, Any]:
    """A category axis in the given order, its labels shortened (the hover keeps the whole name): a long
    approach title would otherwise take the plot's width and push its axis title out of the figure."""
    return axis(
        "",
        type="category",
        categoryorder="array",
        categoryarray=categories,
        tickmode="array",
        tickvals=categories,
        ticktext=[short(c, CATEGORY_LABEL) for c in categories],
        **attributes,
    )


def log_range(values: Sequence[float], pad: float = 1.6) -> list[float]:
    """A log axis range (in log10 units, as plotly wants it) that holds every value with some room."""
    lo, hi = min(values), max(values)
    return [math.log10(lo / pad), math.log10(hi * pad)]


def log_axis(title: str, values: Sequence[float], pad: float = 1.6, **attributes: Any) -> dict[str, Any]:
    """A log axis that holds every value with some room, its ticks as plain numbers (not 1.82e+03)."""
    return axis(title, type="log", range=log_range(values, pad), exponentformat="none", **attributes)


def spans_decades(values: Sequence[float], ratio: float = 20.0) -> bool:
    """Do these (positive) values span enough that a linear axis squashes the small ones?"""
    positive = [v for v in values if v > 0]
    return bool(positive) and len(positive) == len(values) and max(positive) / min(positive) > ratio


def layout(title: str, subtitle: str = "", **attributes: Any) -> dict[str, Any]:
    heading: dict[str, Any] = {"text": title, "x": 0, "xanchor": "left", "font": {"size": 15}}
    if subtitle:
        heading["subtitle"] = {"text": subtitle, "font": {"size": 12, "color": "#667085"}}
    return {
        "title": heading,
        "font": FONT,
        "margin": {"l": 10, "r": 20, "t": 75 if subtitle else 50, "b": 10},
        "height": 440,
        "legend": {"orientation": "h", "yanchor": "top", "y": -0.22, "x": 0},
        "hoverlabel": {"align": "left"},
        **attributes,
    }


@functools.cache
def template() -> dict[str, Any]:
    """The "plotly_white" template as JSON, read once from the plotly package (the only use of it at run
    time: the figures themselves are plain dicts)."""
    return pio.templates["plotly_white"].to_plotly_json()


def figure(data: list[dict[str, Any]], layout: dict[str, Any]) -> Figure:
    """The figure, with the page's template (shared, read-only: the page serializes it)."""
    return {"data": data, "layout": {**layout, "template": template()}}


def trace_groups(
    items: list[Any], title: Callable[[Any], str], status: Callable[[Any], str]
) -> list[tuple[str, list[Any]]]:
    """(trace name, items) pairs: one per item, or one per status when there are more than MAX_TRACES."""
    if len(items) <= MAX_TRACES:
        return [(title(i), [i]) for i in items]
    groups: dict[str, list[Any]] = {}
    for i in items:
        groups.setdefault(status(i), []).append(i)
    return [(f"{status_label(k)} ({len(v)} approaches)", v) for k, v in groups.items()]
