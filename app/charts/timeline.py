"""The campaign timeline: trials and status changes over time (app/domain/timeline.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from app.charts.base import Figure, axis, category_axis, figure, layout, scatter, short, status_color, status_label
from app.domain.timeline import Timeline


def campaign_timeline(timeline: Timeline) -> Figure:
    """Chart 4: trials (one span per approach and trial state, with the count) and status changes (markers,
    colored by the new status) over time, at the dates the history carries."""
    traces = [*_trial_spans(timeline), *_status_markers(timeline)]
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
    if not times:
        return _no_history()
    lo, hi = min(times), max(times)
    pad = max((hi - lo) * 0.05, timedelta(minutes=30))
    x_axis = axis("time (UTC)", type="date", range=[(lo - pad).isoformat(), (hi + pad).isoformat()])
    return figure(
        traces,
        layout(
            "Campaign timeline: status changes and trials",
            subtitle=subtitle,
            xaxis=x_axis,
            yaxis=category_axis(list(dict.fromkeys(y for t in traces for y in t["y"] if y is not None))),
        ),
    )


def _trial_spans(timeline: Timeline) -> list[dict[str, Any]]:
    """One trace of the trials: a span per approach and trial state (none without trials)."""
    xs: list[Any] = []
    ys: list[Any] = []
    hover: list[Any] = []
    for t in timeline.trials:
        end = t.end or t.start
        xs += [t.start.isoformat(), end.isoformat(), None]
        ys += [t.approach_title, t.approach_title, None]
        text = f"{t.count} trial{'s' if t.count != 1 else ''} {t.state}" + ("" if t.end else " (one still running)")
        hover += [text, text, None]
    if not timeline.trials:
        return []
    return [
        scatter(
            x=xs,
            y=ys,
            mode="lines+markers",
            name="trials",
            text=hover,
            line={"width": 8, "color": "rgba(26,115,232,0.45)"},
            marker={"size": 6},
            hovertemplate="<b>%{y}</b><br>%{text}<br>%{x}<extra></extra>",
        )
    ]


def _status_markers(timeline: Timeline) -> list[dict[str, Any]]:
    """One trace per new status: the status changes as markers, colored by the status they went to."""
    by_status: dict[str, list] = {}
    for e in timeline.status_events:
        by_status.setdefault(e.to_status, []).append(e)
    return [
        scatter(
            x=[e.at.isoformat() for e in events],
            y=[e.approach_title for e in events],
            mode="markers",
            name=f"→ {status_label(status)}",
            marker={"size": 11, "color": status_color(status), "symbol": "diamond"},
            customdata=[
                [status_label(e.from_status) or "new", status_label(e.to_status), short(e.reason, 120)] for e in events
            ],
            hovertemplate="<b>%{y}</b><br>%{customdata[0]} → %{customdata[1]}<br>%{customdata[2]}<br>%{x}<extra></extra>",
        )
        for status, events in by_status.items()
    ]


def _no_history() -> Figure:
    """No dates to range over: plotly would draw an empty date axis over the year 2000. Say so instead."""
    return figure(
        [],
        layout(
            "Campaign timeline: status changes and trials",
            height=160,
            xaxis={"visible": False},
            yaxis={"visible": False},
            annotations=[
                {
                    "text": "No history yet: no trial has run and no status has changed.",
                    "showarrow": False,
                    "xref": "paper",
                    "yref": "paper",
                    "x": 0.5,
                    "y": 0.5,
                    "font": {"size": 13, "color": "#667085"},
                }
            ],
        ),
    )
