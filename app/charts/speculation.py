"""The answer's figures over (batch, draft tokens) (app/domain/answer/grid.py). Text from data is HTML-escaped.

- `speedup_vs_batch`: each approach's best speedup per batch, its 95% interval as a band, 1.0 marked.
- `speedup_heatmap`: speedup over (batch, draft tokens) for one approach (the chosen one by default).
- `break_even_batches`: the break-even batch B* per approach.
"""

from __future__ import annotations

from typing import Any

from app.charts.base import (
    BREAK_EVEN_COLOR,
    TRIAL_COLORS,
    Figure,
    axis,
    bar,
    escape,
    figure,
    heatmap,
    layout,
    rgba,
    scatter,
    status_color,
)
from app.domain.answer.grid import ApproachAnswer, SpeculationAnswer
from app.domain.units import plural

MAX_LINES = 8  # more approaches than this: the best tiers' first eight (the rest are in the answer's table)


def _shown(answer: SpeculationAnswer) -> list[ApproachAnswer]:
    order = [key for tier in answer.tiers for key in tier]
    ranked = [a for key in order if (a := answer.approach(key)) is not None and a.best_speedup]
    return ranked[:MAX_LINES]


def _band_edge(
    key: str, color: str, batches: list[int], y: list[Any], name: str, fill: dict[str, Any] | None = None, **after: Any
) -> dict[str, Any]:
    """One edge of an approach's interval band: an invisible line in its legend group, `fill` to the edge before."""
    return scatter(
        mode="lines",
        x=batches,
        y=y,
        **(fill or {}),
        line={"width": 0, "color": color},
        hoverinfo="skip",
        showlegend=False,
        legendgroup=key,
        name=name,
        **after,
    )


def speedup_vs_batch(answer: SpeculationAnswer) -> Figure | None:
    """One line per approach (its best speedup at each measured batch), a band for its interval, y = 1."""
    shown = _shown(answer)
    if not shown:
        return None
    data: list[dict[str, Any]] = []
    for i, a in enumerate(shown):
        color = TRIAL_COLORS[i % len(TRIAL_COLORS)]
        batches = sorted(a.best_speedup)
        figures = [a.best_speedup[b] for b in batches]
        name = escape(a.title)
        if all(f.low is not None for f in figures):
            data.append(_band_edge(a.key, color, batches, [f.high for f in figures], f"{name} 95% high"))
            fill = {"fill": "tonexty", "fillcolor": rgba(color, 0.18)}  # down to the high edge: the band
            lows = [f.low for f in figures]
            data.append(_band_edge(a.key, color, batches, lows, f"{name} 95% interval", fill, meta={"band": a.key}))
        data.append(
            scatter(
                mode="lines+markers",
                x=batches,
                y=[f.value for f in figures],
                name=name,
                legendgroup=a.key,
                line={"color": color, "width": 2},
                marker={"size": 7, "symbol": ["circle" if not f.unstable else "x" for f in figures]},
                customdata=[
                    [a.best_draft_tokens.get(b, 0), "" if f.low is None else f"[{f.low:.2f}, {f.high:.2f}]"]
                    for b, f in zip(batches, figures, strict=True)
                ],
                hovertemplate="batch %{x}: %{y:.2f}x %{customdata[1]} (best k = %{customdata[0]})<extra>"
                + name
                + "</extra>",
            )
        )
    xs = sorted({b for a in shown for b in a.best_speedup})
    data.append(
        scatter(
            mode="lines",
            x=[xs[0], xs[-1]],
            y=[1.0, 1.0],
            name="1.0: no gain",
            line={"color": BREAK_EVEN_COLOR, "dash": "dash", "width": 1.5},
            hoverinfo="skip",
        )
    )
    return figure(
        data,
        layout(
            "Speedup against batch size",
            f"best draft length per batch; band: 95% interval ({answer.resamples} bootstrap resamples); x: unstable",
            xaxis=axis("batch (sequences)", type="log", tickvals=xs, ticktext=[str(x) for x in xs]),
            yaxis=axis("speedup over plain decoding", rangemode="tozero"),
        ),
    )


def speedup_heatmap(answer: SpeculationAnswer, key: str | None = None) -> Figure | None:
    """Speedup over (batch, draft tokens) for one approach; open cells are blank (not extrapolated)."""
    a = answer.approach(key) if key else answer.chosen
    if a is None or not any(c.speedup is not None for c in a.cells):
        return None
    batches, ks = list(answer.batches), list(answer.draft_tokens)
    cells = {(c.batch, c.draft_tokens): c for c in a.cells}
    z, text = [], []
    for k in ks:
        row, labels = [], []
        for b in batches:
            c = cells.get((b, k))
            s = c.speedup if c else None
            row.append(s.value if s else None)
            labels.append(f"{s.value:.2f}" if s else "")
        z.append(row)
        text.append(labels)
    values = [v for row in z for v in row if v is not None]
    # The data's range, widened to hold 1.0 (the colour of no gain); never below 0 (a speedup is positive).
    low, high = max(0.0, min(min(values), 1.0)), max(max(values), 1.0)
    if high - low < 1e-9:
        high = low + 0.1
    return figure(
        [
            heatmap(
                x=[str(b) for b in batches],
                y=[str(k) for k in ks],
                z=z,
                text=text,
                texttemplate="%{text}",
                zmin=low,
                zmax=high,
                # White at 1.0 (no gain) wherever 1.0 falls in the data's range: plotly's zmid would
                # mirror the range around 1 and start the scale below 0 (-0.5 for speedups up to 2.5).
                colorscale=[[0, "#b42318"], [(1.0 - low) / (high - low), "#f5f5f5"], [1, "#067647"]],
                colorbar={"title": {"text": "speedup"}},
                customdata=[[[plural(k, "draft token")] for _ in batches] for k in ks],
                hovertemplate="batch %{x}, %{customdata[0]}: %{z:.2f}x<extra></extra>",
            )
        ],
        layout(
            escape(f"Speedup over batch and draft tokens: {a.title}"),
            "green pays, red loses; blank: an input not measured (never extrapolated)",
            xaxis=axis("batch (sequences)", type="category"),
            yaxis=axis("draft tokens k", type="category"),
        ),
    )


def break_even_batches(answer: SpeculationAnswer) -> Figure | None:
    """B* per approach (0 where no measured batch pays), coloured by status."""
    rows = [a for a in answer.approaches if a.best_speedup]
    if not rows:
        return None
    rows.sort(key=lambda a: -(a.break_even_batch or 0))
    return figure(
        [
            bar(
                x=[escape(a.title) for a in rows],
                y=[a.break_even_batch or 0 for a in rows],
                text=[str(a.break_even_batch) if a.break_even_batch else "never pays" for a in rows],
                textposition="outside",
                marker={"color": [status_color(a.status) for a in rows]},
                hovertemplate="%{x}: pays up to batch %{y}<extra></extra>",
            )
        ],
        layout(
            "Break-even batch per approach",
            "the largest measured batch where the best speedup exceeds 1",
            yaxis=axis("break-even batch B*", rangemode="tozero"),
            xaxis=axis(""),
        ),
    )
