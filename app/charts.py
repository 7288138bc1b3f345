"""Plotly figure builders: domain data in, a figure out as a plain dict in Plotly's JSON schema (no
database, no web, no `plotly.graph_objects`: its validation was most of the charts page's server time).

Every builder has one shape: traces from `_trace("scatter" | "bar" | "heatmap", ...)`, axes from
`_axis(title, ...)`, then `_figure(traces, _layout(title, subtitle, xaxis=..., yaxis=...))`. The dicts
follow plotly.js's attribute names exactly (nested, no `title_text` magic underscores);
tests/charts/test_chart_schema.py validates every builder's output against Plotly's schema. The page embeds
the dict as JSON and static/charts.js draws it with the vendored plotly.js bundle (app/templating.py).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from html import escape as _html_escape
from typing import Any

import plotly.io as pio

from app.domain.answer import (
    LatencySeries,
    ProfitabilityReport,
    ReferencePoint,
    ThroughputRow,
)
from app.domain.answer.latency import _size  # a message size as the model's notes say it (56 KiB)
from app.domain.comparison import Comparison, MetricGroup
from app.domain.timeline import Timeline
from app.templating import STATUS_COLORS, STATUS_LABELS

BREAK_EVEN_COLOR = "#5f6368"
CATEGORY_LABEL = 28  # characters of a category label (an approach's title) on an axis
REPORTED_COLOR = "#1a73e8"
_FONT = {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 13}

Figure = dict[str, Any]


def _label(status: str) -> str:
    return "CPU floor" if status == "cpu_floor" else STATUS_LABELS.get(status, status)


def _color(status: str) -> str:
    """A status's colour: the page's badge colour (static/app.css, read once by app.templating)."""
    return STATUS_COLORS.get(status, "#000")


def _trace(kind: str, **attributes: Any) -> dict[str, Any]:
    """A trace of `kind` ("scatter", "bar", "heatmap": what the vendored bundle draws)."""
    return {"type": kind, **attributes}


def _scatter(**attributes: Any) -> dict[str, Any]:
    return _trace("scatter", **attributes)


def _bar(**attributes: Any) -> dict[str, Any]:
    return _trace("bar", **attributes)


def _axis(title: str, **attributes: Any) -> dict[str, Any]:
    """An axis with its title; automargin keeps tick labels and the title inside the figure at any width."""
    return {"title": {"text": title, "standoff": 8}, "automargin": True, **attributes}


def _category_axis(categories: list[str], **attributes: Any) -> dict[str, Any]:
    """A category axis in the given order, its labels shortened (the hover keeps the whole name): a long
    approach title would otherwise take the plot's width and push its axis title out of the figure."""
    return _axis(
        "",
        type="category",
        categoryorder="array",
        categoryarray=categories,
        tickmode="array",
        tickvals=categories,
        ticktext=[_short(c, CATEGORY_LABEL) for c in categories],
        **attributes,
    )


def _log_axis(title: str, values: Sequence[float], pad: float = 1.6, **attributes: Any) -> dict[str, Any]:
    """A log axis that holds every value with some room, its ticks as plain numbers (not 1.82e+03)."""
    return _axis(title, type="log", range=_log_range(list(values), pad), exponentformat="none", **attributes)


def _spans_decades(values: Sequence[float], ratio: float = 20.0) -> bool:
    """Do these (positive) values span enough that a linear axis squashes the small ones?"""
    positive = [v for v in values if v > 0]
    return bool(positive) and len(positive) == len(values) and max(positive) / min(positive) > ratio


def _layout(title: str, subtitle: str = "", **attributes: Any) -> dict[str, Any]:
    heading: dict[str, Any] = {"text": title, "x": 0, "xanchor": "left", "font": {"size": 15}}
    if subtitle:
        heading["subtitle"] = {"text": subtitle, "font": {"size": 12, "color": "#667085"}}
    return {
        "title": heading,
        "font": _FONT,
        "margin": {"l": 10, "r": 20, "t": 75 if subtitle else 50, "b": 10},
        "height": 440,
        "legend": {"orientation": "h", "yanchor": "top", "y": -0.22, "x": 0},
        "hoverlabel": {"align": "left"},
        **attributes,
    }


@functools.cache
def _template() -> dict[str, Any]:
    """The "plotly_white" template as JSON, read once from the plotly package (the only use of it at run
    time: the figures themselves are plain dicts)."""
    return pio.templates["plotly_white"].to_plotly_json()


def _figure(data: list[dict[str, Any]], layout: dict[str, Any]) -> Figure:
    """The figure, with the page's template (shared, read-only: the page serializes it)."""
    return {"data": data, "layout": {**layout, "template": _template()}}


def _us(value: float) -> str:
    """A latency as a reader writes it: 6.5 us, 38 us, 1,819 us (never 1.82e+03)."""
    return f"{value:,.0f} us" if value >= 100 else f"{value:.1f} us"


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# Past this many approaches a chart draws one trace per status instead of one per approach: the legend
# stays readable and building the figure costs per status, not per approach (issue 12).
MAX_TRACES = 30


def _trace_groups(
    items: list[Any], title: Callable[[Any], str], status: Callable[[Any], str]
) -> list[tuple[str, list[Any]]]:
    """(trace name, items) pairs: one per item, or one per status when there are more than MAX_TRACES."""
    if len(items) <= MAX_TRACES:
        return [(title(i), [i]) for i in items]
    groups: dict[str, list[Any]] = {}
    for i in items:
        groups.setdefault(status(i), []).append(i)
    return [(f"{_label(k)} ({len(v)} approaches)", v) for k, v in groups.items()]


# Past this many reported figures a chart draws them as one trace (each point named in its hover): a
# results campaign reports one figure per measured approach, and a legend entry each crushes the plot.
MAX_REFERENCE_TRACES = 6
# Points labelled on the break-even chart (the rest are named in their hover).
MAX_LABELS = 6


def _reference_groups(refs: list[ReferencePoint]) -> list[tuple[str | None, list[ReferencePoint]]]:
    """(trace name or None for "name it after its one figure", figures): one trace per figure, or the
    baseline alone and the rest together past MAX_REFERENCE_TRACES."""
    if len(refs) <= MAX_REFERENCE_TRACES:
        return [(None, [r]) for r in refs]
    baseline = [r for r in refs if r.baseline]
    others = [r for r in refs if not r.baseline]
    return [(None, [r]) for r in baseline] + [(f"reported figures ({len(others)}, hover for each)", others)]


def _reference_size(ref: ReferencePoint, verify_bytes: int) -> str:
    """ " at 12 KiB" when a reported t_ar was measured at another message size than the chart's, else ""."""
    return f" at {_size(ref.bytes)}" if ref.bytes and ref.bytes != verify_bytes else ""


def _point_size(method: str) -> str:
    """What a measured point's label says when its t_ar is not at the verify size itself."""
    return " (nearest measured size)" if method == "nearest" else ""


def break_even_accept_length(report: ProfitabilityReport) -> Figure | None:
    """Chart 1: the accept length speculation must exceed, tau*(t_ar) = (T_draft + T_verify_compute + N_ar t_ar) /
    T_base, against the per-allreduce latency; each approach at its t_ar (measured: filled, reported: open).
    A point whose t_ar is at another message size than the verify step's says its size in its name and label.
    A lower bound (dashed, said in its name) while draft cost or verify compute is unknown. None without
    T_base and N_ar."""
    curve = report.curve
    if curve is None:
        return None
    verify_bytes = report.inputs.verify_bytes
    t_ars = [p.latency.t_ar_us for p in report.points] + [r.latency.t_ar_us for r in report.references]
    lo, hi = (min(t_ars), max(t_ars)) if t_ars else (1.0, 1000.0)
    log_x = hi / lo > 20
    if log_x:
        x_lo, x_hi = lo / 1.6, hi * 1.6
        grid = [x_lo * (x_hi / x_lo) ** (i / 80) for i in range(81)]
    else:
        x_lo, x_hi = 0.0, hi * 1.15
        grid = [x_lo, x_hi]
    taus = [curve.tau_star(x) for x in grid]
    traces = [
        _scatter(
            x=grid,
            y=taus,
            mode="lines",
            name=curve.label,
            line={"color": BREAK_EVEN_COLOR, "width": 2, "dash": "dash" if curve.lower_bound else "solid"},
            hovertemplate="t_ar %{x:.1f} us → τ* %{y:.3f}<extra></extra>",
        )
    ]
    accept = report.inputs.accept_length
    if accept.value is not None:
        traces.append(
            _scatter(
                x=[grid[0], grid[-1]],
                y=[accept.value, accept.value],
                mode="lines",
                name=f"accept length τ = {accept.value:.2f} ({_short(accept.source, 40)})",
                line={"color": "#067647", "width": 2, "dash": "dot"},
                hoverinfo="name",
            )
        )
    for name, group in _trace_groups(
        list(report.points), lambda p: p.title + _point_size(p.latency.method), lambda p: p.status
    ):
        traces.append(
            _scatter(
                x=[p.latency.t_ar_us for p in group],
                y=[p.tau_star for p in group],
                mode="markers",
                name=name,
                marker={"size": 13, "color": _color(group[0].status), "line": {"width": 1, "color": "#202124"}},
                customdata=[
                    [
                        p.title,
                        _label(p.status),
                        p.latency.method,
                        _short(p.latency.note, 140),
                        f"#{p.latency.trial_id}" if p.latency.trial_id else "-",
                    ]
                    for p in group
                ],
                hovertemplate=(
                    "<b>%{customdata[0]}</b> (%{customdata[1]})<br>t_ar %{x:.1f} us, %{customdata[2]}: "
                    "%{customdata[3]}<br>trial %{customdata[4]}<br>speculation pays above τ* = %{y:.3f}"
                    "<extra></extra>"
                ),
            )
        )
    for group_name, refs in _reference_groups(list(report.references)):
        traces.append(
            _scatter(
                x=[r.latency.t_ar_us for r in refs],
                y=[r.tau_star for r in refs],
                mode="markers",
                name=group_name
                or f"{refs[0].label} ({refs[0].latency.method}{_reference_size(refs[0], verify_bytes)})",
                marker={
                    "size": 13,
                    "symbol": "diamond-open",
                    "line": {"width": 2},
                    "color": BREAK_EVEN_COLOR if refs[0].baseline else REPORTED_COLOR,
                },
                customdata=[[r.label, r.latency.method, _short(r.latency.note, 160)] for r in refs],
                hovertemplate=(
                    "<b>%{customdata[0]}</b> (%{customdata[1]})<br>t_ar %{x:.1f} us: %{customdata[2]}"
                    "<br>speculation pays above τ* = %{y:.3f}<extra></extra>"
                ),
            )
        )
    marks = [p.tau_star for p in report.points] + [r.tau_star for r in report.references]
    top = max([m for m in marks if m is not None] + ([accept.value] if accept.value is not None else []) + [1.0])
    parts = [f"T_base {curve.t_base_ms:.2f} ms, {curve.n_ar} allreduces per verify"]
    if curve.lower_bound:
        parts.append(f"a lower bound: {' and '.join(curve.unknown)} counted as 0")
    else:
        parts.append(f"draft + verify compute {curve.fixed_ms:.2f} ms")
    # (name, the size it was measured at when not the axis', t_ar, tau*): the size always shows in full.
    labelled = [(p.title, _point_size(p.latency.method), p.latency.t_ar_us, p.tau_star) for p in report.points] + [
        (r.label, _reference_size(r, verify_bytes), r.latency.t_ar_us, r.tau_star) for r in report.references
    ]

    def _frac(x: float) -> float:  # the point's place across the x axis, 0..1
        if log_x:
            return (math.log(x) - math.log(x_lo)) / (math.log(x_hi) - math.log(x_lo))
        return (x - x_lo) / (x_hi - x_lo)

    # Labels for the lowest tau* first (the best approaches), skipping a point too close to one already
    # labelled: overlapping labels are unreadable, and every point keeps its hover.
    shown: list[tuple[str, float, float]] = []
    known = sorted(((name, size, x, y) for name, size, x, y in labelled if y is not None), key=lambda item: item[3])
    places: list[float] = []  # the labelled points' places across the axis
    for name, size, x, y in known:
        if len(shown) == MAX_LABELS:
            break
        place = _frac(x)
        if all(abs(place - other) > 0.12 for other in places):
            shown.append((_short(name, 28) + size, x, y))
            places.append(place)
    annotations = [
        {
            "x": math.log10(x) if log_x else x,
            "y": y,
            "text": f"{name}: τ* {y:.2f}",
            "showarrow": False,
            "xanchor": "right" if _frac(x) > 0.6 else "left",
            "xshift": -10 if _frac(x) > 0.6 else 10,
            "yshift": 8,
            "font": {"size": 11, "color": "#344054"},
        }
        for name, x, y in shown
    ]
    floor = min([m for m in marks if m is not None] + taus)
    # tau counts the bonus token, so it is never below 1: when every tau* is above 1 the axis starts there.
    y_lo = 1.0 if floor >= 1.0 and marks else 0.0
    x_title = f"per-allreduce latency t_ar (us) at {_size(verify_bytes)}"
    if any(_reference_size(r, verify_bytes) for r in report.references) or any(
        _point_size(p.latency.method) for p in report.points
    ):
        x_title += ", unless a point names its size"
    return _figure(
        traces,
        _layout(
            "Break-even accept length τ* vs allreduce latency",
            subtitle="speculation pays only when the accept length exceeds τ* · " + " · ".join(parts),
            meta={"lower_bound": curve.lower_bound},
            annotations=annotations,
            xaxis=_axis(
                x_title,
                type="log" if log_x else "linear",
                range=[math.log10(x_lo), math.log10(x_hi)] if log_x else [x_lo, x_hi],
                exponentformat="none",
            ),
            yaxis=_axis("break-even accept length τ*", range=[y_lo, y_lo + (top - y_lo) * 1.15]),
        ),
    )


def latency_comparison(report: ProfitabilityReport) -> Figure | None:
    """For a campaign without speculation: each approach's t_ar at the verify message size (bars, fastest
    first); figures reported elsewhere and CPU-floor figures come after, apart and labelled, never mixed
    with this node's GPU measurements. A log axis when the values span decades (a CPU floor of 3,829 us
    beside GPU figures of 6.5 us). None with nothing to draw."""
    verify_bytes = report.inputs.verify_bytes
    points = sorted(report.points, key=lambda p: p.latency.t_ar_us)
    refs = sorted(report.references, key=lambda r: r.latency.t_ar_us)
    floor = [f for f in report.cpu_floor if f.name.endswith("_us")]
    if not points and not refs and not floor:
        return None
    traces: list[dict[str, Any]] = []
    titles: list[str] = []
    values: list[float] = []
    if points:
        names = [p.title + _point_size(p.latency.method) for p in points]
        traces.append(
            _bar(
                y=names,
                x=[p.latency.t_ar_us for p in points],
                orientation="h",
                name="measured here (GPU)",
                marker={"color": [_color(p.status) for p in points]},
                text=[_us(p.latency.t_ar_us) for p in points],
                textposition="auto",
                customdata=[[p.latency.method, _short(p.latency.note, 140), f"#{p.latency.trial_id}"] for p in points],
                hovertemplate="<b>%{y}</b><br>%{x:,.2f} us (%{customdata[0]})<br>%{customdata[1]}"
                "<br>trial %{customdata[2]}<extra></extra>",
            )
        )
        titles += names
        values += [p.latency.t_ar_us for p in points]
    if refs:
        names = [f"{r.label} (reported{_reference_size(r, verify_bytes)})" for r in refs]
        traces.append(
            _bar(
                y=names,
                x=[r.latency.t_ar_us for r in refs],
                orientation="h",
                name="reported elsewhere (not this node)",
                marker={"color": "rgba(26,115,232,0.25)", "line": {"color": REPORTED_COLOR, "width": 1}},
                text=[_us(r.latency.t_ar_us) for r in refs],
                textposition="auto",
                customdata=[[_short(r.latency.note, 160)] for r in refs],
                hovertemplate="<b>%{y}</b><br>%{x:,.2f} us<br>%{customdata[0]}<extra></extra>",
            )
        )
        titles += names
        values += [r.latency.t_ar_us for r in refs]
    if floor:
        names = [f"{f.title} (CPU floor)" for f in floor]
        traces.append(
            _bar(
                y=names,
                x=[f.value for f in floor],
                orientation="h",
                name="CPU floor (not comparable)",
                marker={"color": "#d0d5dd", "line": {"color": "#667085", "width": 1}},
                text=[_us(f.value) for f in floor],
                textposition="auto",
                hovertemplate="<b>%{y}</b><br>%{x:,.2f} us on a CPU / scaled-down geometry: never fed to the model"
                "<extra></extra>",
            )
        )
        titles += names
        values += [f.value for f in floor]
    title = "per-allreduce latency (us)"
    if _spans_decades(values):
        # Bars on a log axis start at the axis' left end: the range starts below the smallest value.
        x_axis = _log_axis(title + ", log scale", values, pad=2.0)
    else:
        x_axis = _axis(title, range=[0, max(values) * 1.2])
    return _figure(
        traces,
        _layout(
            f"Allreduce latency at the verify message size ({_size(verify_bytes)})",
            subtitle="lower is better · graph mode preferred where measured",
            bargap=0.3,
            xaxis=x_axis,
            yaxis=_category_axis(titles, autorange="reversed"),
        ),
    )


def verify_comm_vs_savings(report: ProfitabilityReport) -> Figure:
    """Chart 1: verify-step communication N_ar x t_ar (x) against speculation savings (y), one point
    per approach with a measured t_ar, and the break-even line y = x: points above it are profitable."""
    xs = [p.comm_ms for p in report.points]
    ys = [p.savings_ms for p in report.points if p.savings_ms is not None]
    top = max([*xs, *ys, 1.0]) * 1.15
    bottom = min([*ys, 0.0])
    bottom = bottom * 1.15 if bottom < 0 else 0.0
    traces = [
        _scatter(
            x=[0, top, 0],
            y=[0, top, top],
            fill="toself",
            mode="none",
            fillcolor="rgba(24,128,56,0.07)",
            name="profitable region",
            hoverinfo="skip",
            showlegend=True,
        ),
        _scatter(
            x=[min(bottom, 0.0), top],
            y=[min(bottom, 0.0), top],
            mode="lines",
            name="break-even (communication = savings)",
            line={"color": BREAK_EVEN_COLOR, "dash": "dash", "width": 2},
            hoverinfo="skip",
        ),
    ]
    for name, group in _trace_groups(list(report.points), lambda p: p.title, lambda p: p.status):
        traces.append(
            _scatter(
                x=[p.comm_ms for p in group],
                y=[p.savings_ms for p in group],
                mode="markers",
                name=name,
                marker={
                    "size": 13,
                    "color": _color(group[0].status),
                    "symbol": ["circle" if p.profitable else "x" for p in group],
                    "line": {"width": 1, "color": "#202124"},
                },
                customdata=[
                    [
                        p.title,
                        _label(p.status),
                        p.stack or "stack not recorded",
                        f"{p.tau:.2f}",
                        p.tau_source,
                        f"#{p.latency.trial_id}",
                        f"{p.latency.t_ar_us:.1f}",
                        p.latency.note,
                        f"{p.speedup:.2f}",
                        "profitable" if p.profitable else "not profitable",
                    ]
                    for p in group
                ],
                hovertemplate=(
                    "<b>%{customdata[0]}</b><br>status: %{customdata[1]}<br>stack: %{customdata[2]}"
                    "<br>accept length: %{customdata[3]} (%{customdata[4]})"
                    "<br>t_ar: %{customdata[6]} us (%{customdata[7]})<br>source trial: %{customdata[5]}"
                    "<br>communication %{x:.2f} ms vs savings %{y:.2f} ms"
                    "<br>speedup %{customdata[8]}x: %{customdata[9]}<extra></extra>"
                ),
            )
        )
    costs = report.costs
    subtitle = "above the line: speculation pays"
    if costs is not None and costs.break_even_t_ar_us is not None:
        subtitle = (
            f"break-even t_ar* = {costs.break_even_t_ar_us:.1f} us per allreduce at "
            f"{_size(report.inputs.verify_bytes)} · above the line: speculation pays"
        )
    axis_range = [min(bottom, 0.0), top]
    return _figure(
        traces,
        _layout(
            "Verify communication vs speculation savings",
            subtitle=subtitle,
            meta={"break_even_t_ar_us": costs.break_even_t_ar_us if costs else None},
            xaxis=_axis("verify communication N_ar × t_ar (ms)", range=axis_range, zeroline=True),
            yaxis=_axis("speculation savings (ms)", range=axis_range, zeroline=True),
        ),
    )


def _log_range(values: list[float], pad: float = 1.6) -> list[float]:
    """A log axis range (in log10 units, as plotly wants it) that holds every value with some room."""
    lo, hi = min(values), max(values)
    return [math.log10(lo / pad), math.log10(hi * pad)]


def allreduce_latency_vs_size(
    series: list[LatencySeries], verify_bytes: int, references: tuple[ReferencePoint, ...] = ()
) -> Figure | None:
    """Chart 2: allreduce latency against message size per approach (log-log), the verify size marked.
    CPU-floor curves are dotted and labelled; reported figures with a size are open diamonds. None when
    there is nothing to draw (no empty axes)."""
    if not series and not any(r.latency.method == "reported" and r.bytes for r in references):
        return None
    xs: list[float] = [verify_bytes]
    ys: list[float] = []

    def title(s: LatencySeries) -> str:
        return f"{s.approach_title} (CPU floor)" if s.cpu_floor else s.approach_title

    traces = []
    for name, group in _trace_groups(series, title, lambda s: "cpu_floor" if s.cpu_floor else s.status):
        gx: list[Any] = []
        gy: list[Any] = []
        info: list[Any] = []
        for s in group:  # several curves in one trace: None breaks the line between them
            gx += [p.bytes for p in s.points] + [None]
            gy += [p.latency_us for p in s.points] + [None]
            info += [
                [
                    title(s),
                    str(p.tags.get("backend", "")),
                    str(p.tags.get("mode", "")),
                    str(p.tags.get("world_size", "")),
                    f"#{p.trial_id}",
                    str(p.tags.get("method", "") or "-"),
                ]
                for p in s.points
            ] + [None]
        xs += [x for x in gx if x is not None]
        ys += [y for y in gy if y is not None]
        floor = group[0].cpu_floor
        traces.append(
            _scatter(
                x=gx[:-1],
                y=gy[:-1],
                mode="lines+markers",
                name=name,
                connectgaps=False,
                marker={"size": 8},
                line={"width": 2, "dash": "dot" if floor else "solid"},
                customdata=info[:-1],
                hovertemplate=(
                    "<b>%{customdata[0]}</b><br>%{x:,} bytes: %{y:.1f} us<br>backend %{customdata[1]}, "
                    "mode %{customdata[2]}, method %{customdata[5]}, %{customdata[3]} ranks"
                    "<br>trial %{customdata[4]}<extra></extra>"
                ),
            )
        )
    sized = [r for r in references if r.latency.method == "reported" and r.bytes]
    for group_name, refs in _reference_groups(sized):
        xs += [r.bytes for r in refs if r.bytes]
        ys += [r.latency.t_ar_us for r in refs]
        traces.append(
            _scatter(
                x=[r.bytes for r in refs],
                y=[r.latency.t_ar_us for r in refs],
                mode="markers",
                name=group_name or f"{refs[0].label} (reported)",
                marker={"size": 12, "symbol": "diamond-open", "line": {"width": 2}},
                customdata=[[r.label, _short(r.latency.note, 140)] for r in refs],
                hovertemplate="<b>%{customdata[0]}</b><br>%{x:,} bytes: %{y:.1f} us<br>%{customdata[1]}<extra></extra>",
            )
        )
    y_axis = _log_axis("latency per allreduce (us)", ys)
    traces.append(
        _scatter(
            x=[verify_bytes, verify_bytes],
            y=[10 ** y_axis["range"][0], 10 ** y_axis["range"][1]],
            mode="lines",
            name=f"verify message ({_size(verify_bytes)})",
            line={"color": BREAK_EVEN_COLOR, "dash": "dot", "width": 2},
            hoverinfo="name",
        )
    )
    return _figure(
        traces,
        _layout("Allreduce latency vs message size", xaxis=_log_axis("message size (bytes)", xs), yaxis=y_axis),
    )


@dataclass(frozen=True)
class ReportedRate:
    """A decode throughput reported elsewhere (the campaign's `reported` figures with a `tok_s`), on the
    row of the approach it is about (or a row of its own)."""

    row: str  # the approach's title, or the figure's label when it names no approach of the campaign
    tok_s: float
    label: str
    source: str


def reported_rates(reported: list[dict[str, Any]] | None, approach_titles: dict[str, str]) -> list[ReportedRate]:
    """The reported decode throughputs of a campaign's `reported` figures (schemas.ReportedFigure)."""
    return [
        ReportedRate(
            approach_titles.get(f.get("approach") or "", f["label"]), float(f["tok_s"]), f["label"], f["source"]
        )
        for f in reported or []
        if f.get("tok_s")
    ]


def throughput_vs_baseline(
    rows: list[ThroughputRow], baseline_tok_s: float | None, reported: Sequence[ReportedRate] = ()
) -> Figure:
    """Chart 3: each approach's best decode throughput as a (horizontal) bar, figures reported elsewhere as
    open diamonds, the baseline as a line; dead ends are marked (✕) with their reason at their measured or
    reported throughput, or at the axis' start (drawn whole) when they have neither. Priority order, top
    down; rows of reported figures about no approach of the campaign come last."""
    titles = [r.approach_title for r in rows]
    titles += [r.row for r in reported if r.row not in titles]
    measured = [r for r in rows if r.tok_s is not None]
    traces = [
        _bar(
            y=[r.approach_title for r in measured],
            x=[r.tok_s for r in measured],
            orientation="h",
            name="decode throughput (measured here)",
            marker={"color": [_color(r.status) for r in measured]},
            text=[f"{r.tok_s:.0f}" for r in measured],
            textposition="inside",
            insidetextanchor="end",
            customdata=[
                [_label(r.status), f"#{r.trial_id}", "with EAGLE-3" if r.speculative else "plain decode"]
                for r in measured
            ],
            hovertemplate="<b>%{y}</b><br>%{x:.1f} tok/s (%{customdata[2]})<br>status: %{customdata[0]}"
            "<br>trial %{customdata[1]}<extra></extra>",
        )
    ]
    if reported:
        traces.append(
            _scatter(
                y=[r.row for r in reported],
                x=[r.tok_s for r in reported],
                mode="markers",
                name="reported elsewhere (not measured here)",
                marker={"symbol": "diamond-open", "size": 13, "color": REPORTED_COLOR, "line": {"width": 2}},
                customdata=[[r.label, _short(r.source, 160)] for r in reported],
                hovertemplate="<b>%{customdata[0]}</b><br>%{x:.1f} tok/s reported: %{customdata[1]}<extra></extra>",
            )
        )
    dead = [r for r in rows if r.status == "dead_end"]
    if dead:
        figures = {r.row: r.tok_s for r in reported}
        traces.append(
            _scatter(
                y=[r.approach_title for r in dead],
                x=[r.tok_s if r.tok_s is not None else figures.get(r.approach_title, 0) for r in dead],
                mode="markers+text",
                name="dead end",
                cliponaxis=False,  # a marker at 0 tok/s is drawn whole, not cut by the axis
                marker={"symbol": "x", "size": 13, "color": _color("dead_end"), "line": {"width": 1, "color": "#fff"}},
                text=[_short(r.reason, 44) for r in dead],
                textposition="middle right",
                textfont={"size": 10},
                customdata=[[r.reason or "no reason recorded"] for r in dead],
                hovertemplate="<b>%{y}</b>: dead end<br>%{customdata[0]}<extra></extra>",
            )
        )
    if baseline_tok_s:
        traces.append(
            _scatter(
                y=titles,
                x=[baseline_tok_s] * len(titles),
                mode="lines",
                name=f"baseline {baseline_tok_s:.0f} tok/s",
                line={"color": BREAK_EVEN_COLOR, "dash": "dash", "width": 2},
                hoverinfo="name",
            )
        )
    top = max([r.tok_s or 0 for r in rows] + [r.tok_s for r in reported] + [baseline_tok_s or 0, 1.0])
    return _figure(
        traces,
        _layout(
            "Decode throughput per approach vs baseline",
            bargap=0.35,
            xaxis=_axis("output tokens/s (batch 1)", range=[0, top * 1.9]),
            yaxis=_category_axis(titles, autorange="reversed"),
        ),
    )


def campaign_timeline(timeline: Timeline) -> Figure:
    """Chart 4: trials (one span per approach and trial state, with the count) and status changes (markers,
    colored by the new status) over time, at the dates the history carries."""
    traces: list[dict[str, Any]] = []
    xs: list[Any] = []
    ys: list[Any] = []
    hover: list[Any] = []
    for t in timeline.trials:
        end = t.end or t.start
        xs += [t.start.isoformat(), end.isoformat(), None]
        ys += [t.approach_title, t.approach_title, None]
        text = f"{t.count} trial{'s' if t.count != 1 else ''} {t.state}" + ("" if t.end else " (one still running)")
        hover += [text, text, None]
    if timeline.trials:
        traces.append(
            _scatter(
                x=xs,
                y=ys,
                mode="lines+markers",
                name="trials",
                text=hover,
                line={"width": 8, "color": "rgba(26,115,232,0.45)"},
                marker={"size": 6},
                hovertemplate="<b>%{y}</b><br>%{text}<br>%{x}<extra></extra>",
            )
        )
    by_status: dict[str, list] = {}
    for e in timeline.status_events:
        by_status.setdefault(e.to_status, []).append(e)
    for status, events in by_status.items():
        traces.append(
            _scatter(
                x=[e.at.isoformat() for e in events],
                y=[e.approach_title for e in events],
                mode="markers",
                name=f"→ {_label(status)}",
                marker={"size": 11, "color": _color(status), "symbol": "diamond"},
                customdata=[
                    [_label(e.from_status) or "new", _label(e.to_status), _short(e.reason, 120)] for e in events
                ],
                hovertemplate="<b>%{y}</b><br>%{customdata[0]} → %{customdata[1]}<br>%{customdata[2]}<br>%{x}<extra></extra>",
            )
        )
    subtitle = ""
    if timeline.approaches_shown < timeline.approaches_total:
        subtitle = (
            f"the {timeline.approaches_shown} most recently active of {timeline.approaches_total} approaches; "
            "trials aggregated per approach and state"
        )
    times = (
        [e.at for e in timeline.status_events]
        + [t.start for t in timeline.trials]
        + [t.end for t in timeline.trials if t.end]
    )
    x_axis = _axis("time (UTC)", type="date")
    if times:
        lo, hi = min(times), max(times)
        pad = max((hi - lo) * 0.05, timedelta(minutes=30))
        x_axis["range"] = [(lo - pad).isoformat(), (hi + pad).isoformat()]
    return _figure(
        traces,
        _layout(
            "Campaign timeline: status changes and trials",
            subtitle=subtitle,
            xaxis=x_axis,
            yaxis=_category_axis(list(dict.fromkeys(y for t in traces for y in t["y"] if y is not None))),
        ),
    )


# One colour per compared trial, the same in every metric's traces and in the page's table headers.
TRIAL_COLORS = ["#2563eb", "#d97706", "#059669", "#dc2626", "#7c3aed", "#0891b2", "#db2777", "#4b5563"]


def escape(text: str) -> str:
    """Plotly draws a subset of HTML in names, titles and labels: data text is escaped (quotes need not be)."""
    return _html_escape(str(text), quote=False)


def _x_axis(group: MetricGroup) -> tuple[str, str]:
    """(axis type, title) for a metric's x: its numeric tag (log when it spans 16x or more), else categories."""
    if group.x_tag is None:
        return "category", ""
    xs = [float(dict(r.point)[group.x_tag]) for r in group.rows]
    log = min(xs) > 0 and max(xs) / min(xs) >= 16
    return ("log" if log else "linear"), escape(group.x_tag)


def trial_comparison(comparison: Comparison) -> dict[str, Any] | None:
    """The compared trials' metrics overlaid: a trace per trial for each metric name, one metric shown at a
    time (a dropdown picks it). A metric measured along a numeric tag (an allreduce sweep over `tokens`) is
    a line per trial along that tag; any other is grouped bars. None when no trial has a metric.
    Trial titles and tag values are escaped: Plotly reads a subset of HTML in names and labels."""
    groups = comparison.metrics
    if not groups:
        return None
    traces: list[dict[str, Any]] = []
    owner: list[int] = []  # the group index of each trace
    for g, group in enumerate(groups):
        for t, column in enumerate(comparison.columns):
            rows = [r for r in group.rows if r.values[t] is not None]
            if not rows:
                continue  # this column did not measure the metric: no empty legend entry
            name = escape(_short(column.label, 50))
            unit = f" {escape(group.unit)}" if group.unit else ""
            common = dict(
                name=name,
                legendgroup=column.key,
                visible=g == 0,
                marker=dict(color=TRIAL_COLORS[t % len(TRIAL_COLORS)]),
                meta={"trial_id": column.trial_id, "column": column.key, "metric": group.name},
                hovertemplate=f"<b>{name}</b><br>%{{x}}: %{{y:.4g}}{unit}<extra></extra>",
            )
            if group.x_tag is not None:
                xs = [dict(r.point)[group.x_tag] for r in rows]
                traces.append(_scatter(x=xs, y=[r.values[t] for r in rows], mode="lines+markers", **common))
            else:
                labels = [escape(r.label) or escape(group.name) for r in rows]
                traces.append({"type": "bar", "x": labels, "y": [r.values[t] for r in rows], **common})
            owner.append(g)

    def view(g: int) -> dict[str, Any]:
        group = groups[g]
        unit = f" ({escape(group.unit)})" if group.unit else ""
        x_type, x_title = _x_axis(group)
        return {
            "title.text": f"{escape(group.name)}{unit}",
            "xaxis.type": x_type,
            "xaxis.title.text": x_title,
            "yaxis.title.text": escape(group.unit),
        }

    first = view(0)
    layout = _layout(
        first["title.text"],
        barmode="group",
        showlegend=True,
        xaxis=_axis(first["xaxis.title.text"], type=first["xaxis.type"]),
        yaxis=_axis(first["yaxis.title.text"], rangemode="tozero"),
    )
    if len(groups) > 1:
        layout["margin"]["t"] = 90
        layout["updatemenus"] = [
            {
                "type": "dropdown",
                "direction": "down",
                "x": 1,
                "xanchor": "right",
                "y": 1.18,
                "yanchor": "top",
                "showactive": True,
                "buttons": [
                    {
                        "label": escape(group.name),
                        "method": "update",
                        "args": [{"visible": [o == g for o in owner]}, view(g)],
                    }
                    for g, group in enumerate(groups)
                ],
            }
        ]
    return {"data": traces, "layout": layout}  # no template: the compare page draws with plotly.js defaults
