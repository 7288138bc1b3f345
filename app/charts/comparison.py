"""The compare page's figure: the compared trials' metrics overlaid (app/domain/comparison.py), one colour
per trial from TRIAL_COLORS."""

from __future__ import annotations

from typing import Any

from app.charts.base import TRIAL_COLORS, Figure, axis, bar, escape, figure, layout, scatter, short
from app.domain.comparison import Comparison, MetricGroup


def _x_axis(group: MetricGroup) -> tuple[str, str]:
    """(axis type, title) for a metric's x: its numeric tag (log when it spans 16x or more), else categories."""
    if group.x_tag is None:
        return "category", ""
    xs = [float(dict(r.point)[group.x_tag]) for r in group.rows]
    log = min(xs) > 0 and max(xs) / min(xs) >= 16
    return ("log" if log else "linear"), escape(group.x_tag)


def trial_comparison(comparison: Comparison) -> Figure | None:
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
            name = escape(short(column.label, 50))
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
                traces.append(scatter(x=xs, y=[r.values[t] for r in rows], mode="lines+markers", **common))
            else:
                labels = [escape(r.label) or escape(group.name) for r in rows]
                traces.append(bar(x=labels, y=[r.values[t] for r in rows], **common))
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
    shape = layout(
        first["title.text"],
        barmode="group",
        showlegend=True,
        xaxis=axis(first["xaxis.title.text"], type=first["xaxis.type"]),
        yaxis=axis(first["yaxis.title.text"], rangemode="tozero"),
    )
    if len(groups) > 1:
        shape["margin"]["t"] = 90
        shape["updatemenus"] = [
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
    return figure(traces, shape)
