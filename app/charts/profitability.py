"""The profitability figures: the break-even accept length against t_ar, the verify step's communication
against speculation's savings, the allreduce latencies at the verify size and against message size
(app/domain/answer in, a plain figure dict out)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from app.charts.base import (
    BREAK_EVEN_COLOR,
    REPORTED_COLOR,
    Figure,
    axis,
    bar,
    category_axis,
    figure,
    layout,
    log_axis,
    scatter,
    short,
    size,
    spans_decades,
    status_color,
    status_label,
    trace_groups,
    us,
)
from app.domain.answer import (
    NO_ALLREDUCES,
    BreakEvenCurve,
    CpuFloor,
    CycleCosts,
    LatencySeries,
    ProfitabilityReport,
    ReferencePoint,
)
from app.domain.units import plural

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
    return f" at {size(ref.bytes)}" if ref.bytes and ref.bytes != verify_bytes else ""


def _reference_look(group_name: str | None, refs: list[ReferencePoint], verify_bytes: int) -> dict[str, Any]:
    """A trace of reported figures' name (its one figure's, where the group has none) and marker: open
    diamonds, the baseline's in the break-even color."""
    first = refs[0]
    return {
        "name": group_name or f"{first.label} ({first.latency.method}{_reference_size(first, verify_bytes)})",
        "marker": {
            "size": 13,
            "symbol": "diamond-open",
            "line": {"width": 2},
            "color": BREAK_EVEN_COLOR if first.baseline else REPORTED_COLOR,
        },
    }


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
    log_x, x_lo, x_hi, grid = _t_ar_axis(report)
    taus = [curve.tau_star(x) for x in grid]
    traces = [
        scatter(
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
            scatter(
                x=[grid[0], grid[-1]],
                y=[accept.value, accept.value],
                mode="lines",
                name=f"accept length τ = {accept.value:.2f} ({short(accept.source, 40)})",
                line={"color": "#067647", "width": 2, "dash": "dot"},
                hoverinfo="name",
            )
        )
    traces += _approach_markers(report)
    traces += _reference_markers(report)
    marks = [p.tau_star for p in report.on_t_ar_axis] + [r.tau_star for r in report.references]
    top = max([m for m in marks if m is not None] + ([accept.value] if accept.value is not None else []) + [1.0])
    parts = _break_even_subtitle(report, curve)
    # (name, the size it was measured at when not the axis', t_ar, tau*): the size always shows in full.
    labelled = [
        (p.title, _point_size(p.latency.method), p.latency.t_ar_us, p.tau_star) for p in report.on_t_ar_axis
    ] + [(r.label, _reference_size(r, verify_bytes), r.latency.t_ar_us, r.tau_star) for r in report.references]

    def _frac(x: float) -> float:  # the point's place across the x axis, 0..1
        if log_x:
            return (math.log(x) - math.log(x_lo)) / (math.log(x_hi) - math.log(x_lo))
        return (x - x_lo) / (x_hi - x_lo)

    annotations = _tau_star_labels(labelled, _frac, log_x)
    floor = min([m for m in marks if m is not None] + taus)
    # tau counts the bonus token, so it is never below 1: when every tau* is above 1 the axis starts there.
    y_lo = 1.0 if floor >= 1.0 and marks else 0.0
    x_title = f"per-allreduce latency t_ar (us) at {size(verify_bytes)}"
    if any(_reference_size(r, verify_bytes) for r in report.references) or any(
        _point_size(p.latency.method) for p in report.on_t_ar_axis
    ):
        x_title += ", unless a point names its size"
    return figure(
        traces,
        layout(
            "Break-even accept length τ* vs allreduce latency",
            subtitle="speculation pays only when the accept length exceeds τ* · " + " · ".join(parts),
            meta={"lower_bound": curve.lower_bound},
            annotations=annotations,
            xaxis=axis(
                x_title,
                type="log" if log_x else "linear",
                range=[math.log10(x_lo), math.log10(x_hi)] if log_x else [x_lo, x_hi],
                exponentformat="none",
            ),
            yaxis=axis("break-even accept length τ*", range=[y_lo, y_lo + (top - y_lo) * 1.15]),
        ),
    )


def _t_ar_axis(report: ProfitabilityReport) -> tuple[bool, float, float, list[float]]:
    """Chart 1's t_ar axis over every point: log where they span more than 20x, and the curve's sample points."""
    t_ars = [p.latency.t_ar_us for p in report.on_t_ar_axis] + [r.latency.t_ar_us for r in report.references]
    lo, hi = (min(t_ars), max(t_ars)) if t_ars else (1.0, 1000.0)
    if lo > 0 and hi / lo > 20:
        x_lo, x_hi = lo / 1.6, hi * 1.6
        return True, x_lo, x_hi, [x_lo * (x_hi / x_lo) ** (i / 80) for i in range(81)]
    return False, 0.0, hi * 1.15, [0.0, hi * 1.15]


def _approach_markers(report: ProfitabilityReport) -> list[dict[str, Any]]:
    """Chart 1's approaches at their t_ar, one trace per name (its size where not the axis'), colored by status."""
    traces = []
    for name, group in trace_groups(
        list(report.on_t_ar_axis), lambda p: p.title + _point_size(p.latency.method), lambda p: p.status
    ):
        traces.append(
            scatter(
                x=[p.latency.t_ar_us for p in group],
                y=[p.tau_star for p in group],
                mode="markers",
                name=name,
                marker={"size": 13, "color": status_color(group[0].status), "line": {"width": 1, "color": "#202124"}},
                customdata=[
                    [
                        p.title,
                        status_label(p.status),
                        p.latency.method,
                        short(p.latency.note, 140),
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
    return traces


def _reference_markers(report: ProfitabilityReport) -> list[dict[str, Any]]:
    """Chart 1's reported figures (open diamonds; the baseline's in the break-even color)."""
    verify_bytes = report.inputs.verify_bytes
    traces = []
    for group_name, refs in _reference_groups(list(report.references)):
        traces.append(
            scatter(
                x=[r.latency.t_ar_us for r in refs],
                y=[r.tau_star for r in refs],
                mode="markers",
                **_reference_look(group_name, refs, verify_bytes),
                customdata=[[r.label, r.latency.method, short(r.latency.note, 160)] for r in refs],
                hovertemplate=(
                    "<b>%{customdata[0]}</b> (%{customdata[1]})<br>t_ar %{x:.1f} us: %{customdata[2]}"
                    "<br>speculation pays above τ* = %{y:.3f}<extra></extra>"
                ),
            )
        )
    return traces


def _break_even_subtitle(report: ProfitabilityReport, curve: BreakEvenCurve) -> list[str]:
    """What chart 1's curve is made of, in words: T_base, N_ar, one-GPU approaches, the fixed costs."""
    parts = [f"T_base {curve.t_base_ms:.2f} ms, {curve.n_ar} allreduces per verify"]
    one_gpu = [p for p in report.points if p.world_1]
    if one_gpu:  # beside approaches that communicate: the count is theirs, not the one-GPU steps'
        parts.append(
            f"{plural(len(one_gpu), 'approach')} at world size 1, no allreduces in the verify step (not drawn)"
        )
    if curve.lower_bound:
        parts.append(f"a lower bound: {' and '.join(curve.unknown)} counted as 0")
    else:
        parts.append(f"draft + verify compute {curve.fixed_ms:.2f} ms")
    return parts


def _tau_star_labels(
    labelled: list[tuple[str, str, float, float | None]], frac: Callable[[float], float], log_x: bool
) -> list[dict[str, Any]]:
    """Chart 1's point labels: the lowest tau* first (the best approaches), skipping a point too close to one
    already labelled: overlapping labels are unreadable, and every point keeps its hover."""
    shown: list[tuple[str, float, float]] = []
    known = sorted(((name, at, x, y) for name, at, x, y in labelled if y is not None), key=lambda item: item[3])
    places: list[float] = []  # the labelled points' places across the axis
    for name, at, x, y in known:
        if len(shown) == MAX_LABELS:
            break
        place = frac(x)
        if all(abs(place - other) > 0.12 for other in places):
            shown.append((short(name, 28) + at, x, y))
            places.append(place)
    return [
        {
            "x": math.log10(x) if log_x else x,
            "y": y,
            "text": f"{name}: τ* {y:.2f}",
            "showarrow": False,
            "xanchor": "right" if frac(x) > 0.6 else "left",
            "xshift": -10 if frac(x) > 0.6 else 10,
            "yshift": 8,
            "font": {"size": 11, "color": "#344054"},
        }
        for name, x, y in shown
    ]


def latency_comparison(report: ProfitabilityReport) -> Figure | None:
    """For a campaign without speculation: each approach's t_ar at the verify message size (bars, fastest
    first); figures reported elsewhere and CPU-floor figures come after, apart and labelled, never mixed
    with this node's GPU measurements. A log axis when the values span decades (a CPU floor of 3,829 us
    beside GPU figures of 6.5 us). None with nothing to draw."""
    verify_bytes = report.inputs.verify_bytes
    points = sorted(report.on_t_ar_axis, key=lambda p: p.latency.t_ar_us)
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
            _latency_bars(
                names,
                [p.latency.t_ar_us for p in points],
                "measured here (GPU)",
                {"color": [status_color(p.status) for p in points]},
                customdata=[[p.latency.method, short(p.latency.note, 140), f"#{p.latency.trial_id}"] for p in points],
                hovertemplate="<b>%{y}</b><br>%{x:,.2f} us (%{customdata[0]})<br>%{customdata[1]}"
                "<br>trial %{customdata[2]}<extra></extra>",
            )
        )
        titles += names
        values += [p.latency.t_ar_us for p in points]
    if refs:
        names = [f"{r.label} (reported{_reference_size(r, verify_bytes)})" for r in refs]
        traces.append(
            _latency_bars(
                names,
                [r.latency.t_ar_us for r in refs],
                "reported elsewhere (not this node)",
                {"color": "rgba(26,115,232,0.25)", "line": {"color": REPORTED_COLOR, "width": 1}},
                customdata=[[short(r.latency.note, 160)] for r in refs],
                hovertemplate="<b>%{y}</b><br>%{x:,.2f} us<br>%{customdata[0]}<extra></extra>",
            )
        )
        titles += names
        values += [r.latency.t_ar_us for r in refs]
    if floor:
        names = [f"{f.title} (CPU floor)" for f in floor]
        traces.append(_cpu_floor_bars(names, floor))
        titles += names
        values += [f.value for f in floor]
    title = "per-allreduce latency (us)"
    if spans_decades(values):
        # Bars on a log axis start at the axis' left end: the range starts below the smallest value.
        x_axis = log_axis(title + ", log scale", values, pad=2.0)
    else:
        x_axis = axis(title, range=[0, max(values) * 1.2])
    return figure(
        traces,
        layout(
            f"Allreduce latency at the verify message size ({size(verify_bytes)})",
            subtitle="lower is better · graph mode preferred where measured",
            bargap=0.3,
            xaxis=x_axis,
            yaxis=category_axis(titles, autorange="reversed"),
        ),
    )


def _latency_bars(
    names: list[str], values: list[float], name: str, marker: dict[str, Any], **hover: Any
) -> dict[str, Any]:
    """One group of the latency chart's horizontal bars, each labelled with its latency."""
    return bar(
        y=names,
        x=values,
        orientation="h",
        name=name,
        marker=marker,
        text=[us(v) for v in values],
        textposition="auto",
        **hover,
    )


def _cpu_floor_bars(names: list[str], floor: list[CpuFloor]) -> dict[str, Any]:
    """CPU-floor figures, grey: shown apart, never fed to the model."""
    return _latency_bars(
        names,
        [f.value for f in floor],
        "CPU floor (not comparable)",
        {"color": "#d0d5dd", "line": {"color": "#667085", "width": 1}},
        hovertemplate="<b>%{y}</b><br>%{x:,.2f} us on a CPU / scaled-down geometry: never fed to the model"
        "<extra></extra>",
    )


def verify_comm_vs_savings(report: ProfitabilityReport) -> Figure | None:
    """Chart 1: verify-step communication N_ar x t_ar (x) against speculation savings (y), one point per
    approach with a measured t_ar (filled) and one per figure reported elsewhere (open diamonds, at the
    campaign's accept length), and the break-even line y = x: points above it are profitable. The axes hold
    every point. None unless the campaign asks the speculation question with every cost known."""
    costs = report.costs
    if not report.speculative or costs is None:
        return None
    refs = list(report.references)
    xs = [p.comm_ms for p in report.points] + [costs.comm_ms(r.latency.t_ar_us) for r in refs]
    ys = [p.savings_ms for p in report.points if p.savings_ms is not None] + [costs.savings_ms] * len(refs)
    top = max([*xs, *ys, 1.0]) * 1.15
    bottom = min([*ys, 0.0])
    bottom = bottom * 1.15 if bottom < 0 else 0.0
    traces = [
        scatter(
            x=[0, top, 0],
            y=[0, top, top],
            fill="toself",
            mode="none",
            fillcolor="rgba(24,128,56,0.07)",
            name="profitable region",
            hoverinfo="skip",
            showlegend=True,
        ),
        scatter(
            x=[bottom, top],
            y=[bottom, top],
            mode="lines",
            name="break-even (communication = savings)",
            line={"color": BREAK_EVEN_COLOR, "dash": "dash", "width": 2},
            hoverinfo="skip",
        ),
    ]
    traces += _reported_savings(report, costs, refs)
    traces += _approach_savings(report)
    subtitle = "above the line: speculation pays"
    if costs.n_ar == 0:  # no communication: every point sits at x = 0, and no t_ar decides it
        subtitle = (
            f"{NO_ALLREDUCES if report.world_1 else 'no allreduces per verify'}, so no break-even t_ar · {subtitle}"
        )
    if costs.break_even_t_ar_us is not None:
        subtitle = (
            f"break-even t_ar* = {costs.break_even_t_ar_us:.1f} us per allreduce at "
            f"{size(report.inputs.verify_bytes)} · above the line: speculation pays"
        )
    axis_range = [bottom, top]
    return figure(
        traces,
        layout(
            "Verify communication vs speculation savings",
            subtitle=subtitle,
            meta={"break_even_t_ar_us": costs.break_even_t_ar_us},
            xaxis=axis("verify communication N_ar × t_ar (ms)", range=axis_range, zeroline=True),
            yaxis=axis("speculation savings (ms)", range=axis_range, zeroline=True),
        ),
    )


def _reported_savings(
    report: ProfitabilityReport, costs: CycleCosts, refs: list[ReferencePoint]
) -> list[dict[str, Any]]:
    """Chart 2's reported figures: open diamonds at the campaign's accept length."""
    traces = []
    verify_bytes = report.inputs.verify_bytes
    accept = report.inputs.accept_length
    for group_name, shown in _reference_groups(refs):
        traces.append(
            scatter(
                x=[costs.comm_ms(r.latency.t_ar_us) for r in shown],
                y=[costs.savings_ms for _ in shown],
                mode="markers",
                **_reference_look(group_name, shown, verify_bytes),
                customdata=[
                    [
                        r.label,
                        f"{r.latency.t_ar_us:.1f}",
                        short(r.latency.note, 160),
                        f"{costs.tau:.2f}",
                        short(accept.source, 60),
                        f"{costs.speedup(r.latency.t_ar_us):.2f}",
                        "profitable" if costs.profitable(r.latency.t_ar_us) else "not profitable",
                    ]
                    for r in shown
                ],
                hovertemplate=(
                    "<b>%{customdata[0]}</b> (reported, not measured here)<br>t_ar: %{customdata[1]} us "
                    "(%{customdata[2]})<br>accept length: %{customdata[3]} (%{customdata[4]})"
                    "<br>communication %{x:.2f} ms vs savings %{y:.2f} ms"
                    "<br>speedup %{customdata[5]}x: %{customdata[6]}<extra></extra>"
                ),
            )
        )
    return traces


def _approach_savings(report: ProfitabilityReport) -> list[dict[str, Any]]:
    """Chart 2's approaches: communication against savings, a circle where it pays, an x where it does not."""
    traces = []
    # A point off the answer's grid has no savings nor speedup (its grid note says why): not drawn here.
    decided = [p for p in report.points if p.savings_ms is not None and p.speedup is not None]
    for name, group in trace_groups(decided, lambda p: p.title, lambda p: p.status):
        traces.append(
            scatter(
                x=[p.comm_ms for p in group],
                y=[p.savings_ms for p in group],
                mode="markers",
                name=name,
                marker={
                    "size": 13,
                    "color": status_color(group[0].status),
                    "symbol": ["circle" if p.profitable else "x" for p in group],
                    "line": {"width": 1, "color": "#202124"},
                },
                customdata=[
                    [
                        p.title,
                        status_label(p.status),
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
    return traces


def _curves_in_one_trace(
    group: list[LatencySeries], title: Callable[[LatencySeries], str]
) -> tuple[list[Any], list[Any], list[Any]]:
    """Several curves as one trace's x, y and hover data: None breaks the line between them."""
    gx: list[Any] = []
    gy: list[Any] = []
    info: list[Any] = []
    for s in group:
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
    return gx, gy, info


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
    for name, group in trace_groups(series, title, lambda s: "cpu_floor" if s.cpu_floor else s.status):
        gx, gy, info = _curves_in_one_trace(group, title)
        xs += [x for x in gx if x is not None]
        ys += [y for y in gy if y is not None]
        floor = group[0].cpu_floor
        traces.append(
            scatter(
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
            scatter(
                x=[r.bytes for r in refs],
                y=[r.latency.t_ar_us for r in refs],
                mode="markers",
                name=group_name or f"{refs[0].label} (reported)",
                marker={"size": 12, "symbol": "diamond-open", "line": {"width": 2}},
                customdata=[[r.label, short(r.latency.note, 140)] for r in refs],
                hovertemplate="<b>%{customdata[0]}</b><br>%{x:,} bytes: %{y:.1f} us<br>%{customdata[1]}<extra></extra>",
            )
        )
    y_axis = log_axis("latency per allreduce (us)", ys)
    traces.append(
        scatter(
            x=[verify_bytes, verify_bytes],
            y=[10 ** y_axis["range"][0], 10 ** y_axis["range"][1]],
            mode="lines",
            name=f"verify message ({size(verify_bytes)})",
            line={"color": BREAK_EVEN_COLOR, "dash": "dot", "width": 2},
            hoverinfo="name",
        )
    )
    return figure(
        traces,
        layout("Allreduce latency vs message size", xaxis=log_axis("message size (bytes)", xs), yaxis=y_axis),
    )
