"""Plotly figures of the answer over (batch, draft tokens): plain figure dicts (data in, dict out), drawn
by the locally served plotly.js (scatter, heatmap and bar traces only). Text from data is HTML-escaped.

- `speedup_vs_batch`: each approach's best speedup per batch, its 95% interval as a band, 1.0 marked.
- `speedup_heatmap`: speedup over (batch, draft tokens) for one approach (the chosen one by default).
- `break_even_batches`: the break-even batch B* per approach.
"""

from __future__ import annotations

from typing import Any

from app.charts import STATUS_COLORS, escape
from app.domain.answer.grid import ApproachAnswer, SpeculationAnswer

_FONT = {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 13}
PALETTE = ["#2563eb", "#d97706", "#059669", "#dc2626", "#7c3aed", "#0891b2", "#db2777", "#4b5563"]
MAX_LINES = 8  # more approaches than this: the best tiers' first eight (the rest are in the answer's table)


def _layout(title: str, subtitle: str, **kw: Any) -> dict[str, Any]:
    return {
        "title": {
            "text": escape(title),
            "x": 0,
            "xanchor": "left",
            "font": {"size": 15},
            "subtitle": {"text": escape(subtitle), "font": {"size": 12, "color": "#667085"}},
        },
        "font": _FONT,
        "margin": {"l": 60, "r": 20, "t": 75, "b": 40},
        "height": 440,
        "legend": {"orientation": "h", "yanchor": "top", "y": -0.2, "x": 0},
        "hoverlabel": {"align": "left"},
        **kw,
    }


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _shown(answer: SpeculationAnswer) -> list[ApproachAnswer]:
    order = [key for tier in answer.tiers for key in tier]
    ranked = [a for key in order if (a := answer.approach(key)) is not None and a.best_speedup]
    return ranked[:MAX_LINES]


def speedup_vs_batch(answer: SpeculationAnswer) -> dict[str, Any] | None:
    """One line per approach (its best speedup at each measured batch), a band for its interval, y = 1."""
    shown = _shown(answer)
    if not shown:
        return None
    data: list[dict[str, Any]] = []
    for i, a in enumerate(shown):
        color = PALETTE[i % len(PALETTE)]
        batches = sorted(a.best_speedup)
        figures = [a.best_speedup[b] for b in batches]
        name = escape(a.title)
        if all(f.low is not None for f in figures):
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": batches,
                    "y": [f.high for f in figures],
                    "line": {"width": 0, "color": color},
                    "hoverinfo": "skip",
                    "showlegend": False,
                    "legendgroup": a.key,
                    "name": f"{name} 95% high",
                }
            )
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": batches,
                    "y": [f.low for f in figures],
                    "fill": "tonexty",
                    "fillcolor": _rgba(color, 0.18),
                    "line": {"width": 0, "color": color},
                    "hoverinfo": "skip",
                    "showlegend": False,
                    "legendgroup": a.key,
                    "name": f"{name} 95% interval",
                    "meta": {"band": a.key},
                }
            )
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "x": batches,
                "y": [f.value for f in figures],
                "name": name,
                "legendgroup": a.key,
                "line": {"color": color, "width": 2},
                "marker": {"size": 7, "symbol": ["circle" if not f.unstable else "x" for f in figures]},
                "customdata": [
                    [a.best_draft_tokens.get(b, 0), "" if f.low is None else f"[{f.low:.2f}, {f.high:.2f}]"]
                    for b, f in zip(batches, figures, strict=True)
                ],
                "hovertemplate": "batch %{x}: %{y:.2f}x %{customdata[1]} (best k = %{customdata[0]})<extra>"
                + name
                + "</extra>",
            }
        )
    xs = sorted({b for a in shown for b in a.best_speedup})
    data.append(
        {
            "type": "scatter",
            "mode": "lines",
            "x": [xs[0], xs[-1]],
            "y": [1.0, 1.0],
            "name": "1.0: no gain",
            "line": {"color": "#5f6368", "dash": "dash", "width": 1.5},
            "hoverinfo": "skip",
        }
    )
    return {
        "data": data,
        "layout": _layout(
            "Speedup against batch size",
            f"best draft length per batch; band: 95% interval ({answer.resamples} bootstrap resamples); x: unstable",
            xaxis={
                "title": {"text": "batch (sequences)"},
                "type": "log",
                "tickvals": xs,
                "ticktext": [str(x) for x in xs],
            },
            yaxis={"title": {"text": "speedup over plain decoding"}, "rangemode": "tozero"},
        ),
    }


def speedup_heatmap(answer: SpeculationAnswer, key: str | None = None) -> dict[str, Any] | None:
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
    return {
        "data": [
            {
                "type": "heatmap",
                "x": [str(b) for b in batches],
                "y": [str(k) for k in ks],
                "z": z,
                "text": text,
                "texttemplate": "%{text}",
                "zmid": 1.0,
                "colorscale": [[0, "#b42318"], [0.5, "#f5f5f5"], [1, "#067647"]],
                "colorbar": {"title": {"text": "speedup"}},
                "hovertemplate": "batch %{x}, %{y} draft tokens: %{z:.2f}x<extra></extra>",
            }
        ],
        "layout": _layout(
            f"Speedup over batch and draft tokens: {a.title}",
            "green pays, red loses; blank: an input not measured (never extrapolated)",
            xaxis={"title": {"text": "batch (sequences)"}, "type": "category"},
            yaxis={"title": {"text": "draft tokens k"}, "type": "category"},
        ),
    }


def break_even_batches(answer: SpeculationAnswer) -> dict[str, Any] | None:
    """B* per approach (0 where no measured batch pays), coloured by status."""
    rows = [a for a in answer.approaches if a.best_speedup]
    if not rows:
        return None
    rows.sort(key=lambda a: -(a.break_even_batch or 0))
    return {
        "data": [
            {
                "type": "bar",
                "x": [escape(a.title) for a in rows],
                "y": [a.break_even_batch or 0 for a in rows],
                "text": [str(a.break_even_batch) if a.break_even_batch else "never pays" for a in rows],
                "textposition": "outside",
                "marker": {"color": [STATUS_COLORS.get(a.status, "#6b7280") for a in rows]},
                "hovertemplate": "%{x}: pays up to batch %{y}<extra></extra>",
            }
        ],
        "layout": _layout(
            "Break-even batch per approach",
            "the largest measured batch where the best speedup exceeds 1",
            yaxis={"title": {"text": "break-even batch B*"}, "rangemode": "tozero"},
            xaxis={"automargin": True},
        ),
    }
