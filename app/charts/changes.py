"""The approach page's change-point chart (app/domain/changes.py): one series' values trial by trial with
its change points marked."""

from __future__ import annotations

from collections.abc import Sequence

from app.charts.base import Figure, axis, escape, figure, layout, scatter
from app.domain.changes import Series
from app.models import ChangePoint

SERIES_COLOR = "#1a73e8"
FINDING_COLORS = {"slower": "#d93025", "faster": "#188038"}


def series_with_changes(series: Series, runner_name: str, points: Sequence[ChangePoint]) -> Figure:
    """The series (x: the trials in the order they ran) and a marker on the first trial after each change."""
    x = list(range(1, len(series.points) + 1))
    at = {p.trial_id: i for i, p in enumerate(series.points)}
    traces = [
        scatter(
            x=x,
            y=[p.value for p in series.points],
            mode="lines+markers",
            name=escape(series.metric),
            line={"color": SERIES_COLOR},
            text=[f"trial #{p.trial_id}" for p in series.points],
            hovertemplate="%{text}: %{y}<extra></extra>",
        )
    ]
    for verdict, color in FINDING_COLORS.items():
        marked = [c for c in points if c.verdict == verdict and c.trial_id in at]
        if marked:
            traces.append(
                scatter(
                    x=[at[c.trial_id] + 1 for c in marked],
                    y=[series.points[at[c.trial_id]].value for c in marked],
                    mode="markers",
                    name=f"{verdict} (change point)",
                    marker={"color": color, "size": 13, "symbol": "diamond"},
                    text=[
                        escape(f"trial #{c.trial_id}: x{c.ratio:.3f}. {c.stack_diff or 'same stack'}") for c in marked
                    ],
                    hovertemplate="%{text}<extra></extra>",
                )
            )
    where = f" ({series.point})" if series.point else ""
    return figure(
        traces,
        layout(
            escape(f"{series.metric}{where} on {runner_name}"),
            "one value per trial (its samples' median); diamonds mark change points",
            height=320,
            xaxis=axis("trial (in the order they ran)"),
            yaxis=axis(escape(series.unit or series.metric)),
        ),
    )
