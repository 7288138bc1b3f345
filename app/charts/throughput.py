"""The throughput figure: each approach's decode throughput against the baseline, with figures reported
elsewhere and dead ends marked."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.charts.base import (
    BREAK_EVEN_COLOR,
    REPORTED_COLOR,
    Figure,
    axis,
    bar,
    category_axis,
    escape,
    figure,
    layout,
    scatter,
    short,
    status_color,
    status_label,
)
from app.domain.answer import ThroughputRow

DEAD_END_LABEL_GAP = 16  # px between a dead end's marker and its reason: past the ✕ and a reported diamond


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
    traces = [_measured_bars(rows)]
    if reported:
        traces.append(_reported_diamonds(reported))
    dead = [r for r in rows if r.status == "dead_end"]
    at = {r.row: r.tok_s for r in reported}  # a dead end without a figure of its own is drawn at its reported one
    if dead:
        traces.append(_dead_end_markers(dead, at))
    if baseline_tok_s:
        traces.append(
            scatter(
                y=titles,
                x=[baseline_tok_s] * len(titles),
                mode="lines",
                name=f"baseline {baseline_tok_s:.0f} tok/s",
                line={"color": BREAK_EVEN_COLOR, "dash": "dash", "width": 2},
                hoverinfo="name",
            )
        )
    top = max([r.tok_s or 0 for r in rows] + [r.tok_s for r in reported] + [baseline_tok_s or 0, 1.0])
    x_hi = top * 1.9
    notes = _dead_end_notes(dead, at, x_hi)
    return figure(
        traces,
        layout(
            "Decode throughput per approach vs baseline",
            bargap=0.35,
            annotations=notes,
            xaxis=axis("output tokens/s (batch 1)", range=[0, x_hi]),
            yaxis=category_axis(titles, autorange="reversed"),
        ),
    )


def _measured_bars(rows: list[ThroughputRow]) -> dict[str, Any]:
    """Each approach's best measured decode throughput, a horizontal bar colored by its status."""
    measured = [r for r in rows if r.tok_s is not None]
    return bar(
        y=[r.approach_title for r in measured],
        x=[r.tok_s for r in measured],
        orientation="h",
        name="decode throughput (measured here)",
        marker={"color": [status_color(r.status) for r in measured]},
        text=[f"{r.tok_s:.0f}" for r in measured],
        textposition="inside",
        insidetextanchor="end",
        customdata=[
            [status_label(r.status), f"#{r.trial_id}", "with EAGLE-3" if r.speculative else "plain decode"]
            for r in measured
        ],
        hovertemplate="<b>%{y}</b><br>%{x:.1f} tok/s (%{customdata[2]})<br>status: %{customdata[0]}"
        "<br>trial %{customdata[1]}<extra></extra>",
    )


def _reported_diamonds(reported: Sequence[ReportedRate]) -> dict[str, Any]:
    """Figures reported elsewhere, as open diamonds."""
    return scatter(
        y=[r.row for r in reported],
        x=[r.tok_s for r in reported],
        mode="markers",
        name="reported elsewhere (not measured here)",
        marker={"symbol": "diamond-open", "size": 13, "color": REPORTED_COLOR, "line": {"width": 2}},
        customdata=[[r.label, short(r.source, 160)] for r in reported],
        hovertemplate="<b>%{customdata[0]}</b><br>%{x:.1f} tok/s reported: %{customdata[1]}<extra></extra>",
    )


def _dead_end_markers(dead: list[ThroughputRow], at: dict[str, float]) -> dict[str, Any]:
    """Dead ends (✕) at their measured or reported throughput, else at the axis' start (drawn whole)."""
    return scatter(
        y=[r.approach_title for r in dead],
        x=[r.tok_s if r.tok_s is not None else at.get(r.approach_title, 0) for r in dead],
        mode="markers",
        name="dead end",
        cliponaxis=False,  # a marker at 0 tok/s is drawn whole, not cut by the axis
        marker={
            "symbol": "x",
            "size": 13,
            "color": status_color("dead_end"),
            "line": {"width": 1, "color": "#fff"},
        },
        customdata=[[r.reason or "no reason recorded"] for r in dead],
        hovertemplate="<b>%{y}</b>: dead end<br>%{customdata[0]}<extra></extra>",
    )


def _dead_end_notes(dead: list[ThroughputRow], at: dict[str, float], x_hi: float) -> list[dict[str, Any]]:
    """A dead end's reason beside its marker, past the marker and a reported diamond drawn at the same figure
    (text on the marker overlapped both), on the side with room: the label stays inside the plot."""
    notes = []
    for r in dead:
        x = r.tok_s if r.tok_s is not None else at.get(r.approach_title, 0)
        right_half = x > 0.45 * x_hi
        notes.append(
            {
                "x": x,
                "y": r.approach_title,
                "text": escape(short(r.reason, 40)) if r.reason else "dead end",
                "showarrow": False,
                "xanchor": "right" if right_half else "left",
                "xshift": -DEAD_END_LABEL_GAP if right_half else DEAD_END_LABEL_GAP,
                "font": {"size": 10, "color": "#344054"},
            }
        )
    return notes
