"""Compare trials: `/campaigns/{slug}/compare?trial=12&trial=15` (or `?approach=nccl&approach=symm`, over
each approach's succeeded trials) shows their metrics overlaid in one Plotly chart, their values side by
side with each row's verdict and interval (app/domain/statistics.py), and their stacks diffed; with
fewer than two picked it is the picker alone. The page follows the campaign's page feed: the metrics
re-render as trials land (a Settle or Repeat in progress). The same comparison as JSON is
GET /api/campaigns/{slug}/compare (app/api/trials.py)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from markupsafe import Markup, escape
from pydantic import Field
from sqlmodel import Session

from app.charts import TRIAL_COLORS, trial_comparison
from app.deps import OperatorDep, take_feed_mark
from app.domain import comparison as comparison_domain
from app.domain import repeats, statistics, trial_reads
from app.domain.campaigns import get_campaign
from app.schemas import SLUG_PATTERN, SettleForm
from app.services.trials import start_settle
from app.state import app_state
from app.web.render import render

router = APIRouter(include_in_schema=False)

PICKER_TRIALS = 30  # the latest trials offered for picking

# Past the comparison's bound the domain answers with its own message; this bound only keeps URLs sane.
PageTrialIds = Annotated[list[Annotated[int, Field(ge=1, le=2**63 - 1)]] | None, Query(max_length=50)]
PageApproachKeys = Annotated[
    list[Annotated[str, Field(pattern=SLUG_PATTERN, max_length=80)]] | None, Query(max_length=50)
]


@dataclass(frozen=True)
class TableRow:
    metric: str
    first: bool  # the metric's first row (its name is printed there)
    lower_is_better: bool
    point: str
    unit: str
    cells: Markup  # its columns' cells, escaped: each figure, then (after the first) its verdict against the first


def metric_table(comparison: comparison_domain.Comparison) -> list[TableRow]:
    """The values table's rows, their cells built here as one escaped text a row: 1,600 points x 8 columns a
    page (issue 24's size) cost the template a third of the request when it printed each cell's dozen
    fields itself (docs/performance.md, "Compare page, fourth pass")."""
    out = []
    for group in comparison.metrics:
        for r, row in enumerate(group.rows):
            sides = row.stats.sides if row.stats else []
            pairs = row.stats.pairs if row.stats else []
            cells = []
            for c, v in enumerate(row.values):
                cells.append(_value_cell(v, sides[c] if c < len(sides) else None))
                if c:
                    cells.append(_finding_cell(pairs[c - 1] if c <= len(pairs) else None))
            out.append(
                TableRow(group.name, r == 0, group.lower_is_better, row.label, group.unit, Markup("".join(cells)))
            )
    return out


def _value_cell(v: float | None, side: statistics.Side | None) -> str:
    """'<td class="num">12.3<br><span ...>3 trials · n=300 · CV 1.0% · run-to-run 2.0%</span></td>' (no note
    for a lone value)."""
    text = f"{v:.4g}" if v is not None else "–"
    if side is None or side.samples <= 1:
        return f'<td class="num">{text}</td>'
    note = f"{side.trials} trial{'s' if side.trials != 1 else ''} · n={side.samples}"
    if side.cv is not None:
        note += f" · CV {side.cv * 100:.1f}%"
    if side.between_cv is not None:
        note += f" · run-to-run {side.between_cv * 100:.1f}%"
    unstable = ' <span class="unstable-mark" data-unstable="1">unstable</span>' if side.unstable else ""
    return f'<td class="num">{text}<br><span class="small muted">{note}</span>{unstable}</td>'


NO_FINDING = (
    '<span class="muted no-verdict">one trial a side and no run-to-run spread known for this point: no difference'
    " can be claimed; repeat to decide</span>"
)


FINDING_SPANS = {
    v: f'<span class="verdict verdict-{v.value}">{escape(words)}</span>'
    for v, words in statistics.FINDING_WORDS.items()
}
# The spreads' notes and stack differences repeat down the table (one text per runner and point set): each
# is escaped once.
_escaped = functools.lru_cache(maxsize=4096)(escape)


def _finding_cell(pair: comparison_domain.PairFinding | None) -> str:
    """A column against the first at a point: its verdict's words, ratio and interval, p-value, the trials a
    side that would decide an inconclusive row, the spread it used, the stack difference; or why it was not
    compared (data-verdict "none")."""
    if pair is None:
        return '<td class="verdict-cell small" data-verdict="none"></td>'
    st = pair.stats
    if st is None:
        why = f'<span class="muted">{escape(pair.not_compared)}</span>' if pair.not_compared else ""
        return f'<td class="verdict-cell small" data-verdict="none">{why}</td>'
    verdict = st.verdict.value
    parts = [FINDING_SPANS[st.verdict]]
    if st.why_no_finding:
        parts.append(f'<span class="unstable-mark no-verdict">{escape(st.why_no_finding)}</span>')
    elif st.verdict == statistics.Finding.no_verdict:
        parts.append(NO_FINDING)
    if st.ratio:
        ratio = f"×{st.ratio.value:.3f}"
        if st.ratio.low is not None and st.ratio.high is not None:
            ratio += f" [{st.ratio.low:.3f}, {st.ratio.high:.3f}]"
        parts.append(f'<span class="ratio">{ratio}</span>')
    if st.p_value is not None:
        parts.append(f'<span class="muted">p={st.p_value:.2g}</span>')
    if st.verdict == statistics.Finding.inconclusive:
        needed = (
            f"needs {st.trials_needed} trials a side"
            if st.trials_needed is not None
            else "too noisy to decide: fix the noise first"
        )
        parts.append(f'<span class="muted trials-needed">{needed}</span>')
    if pair.spread:
        parts.append(f'<span class="muted spread-note">{_escaped(pair.spread)}</span>')
    if pair.stack_difference:
        parts.append(f'<span class="differs-mark">≠ {_escaped(pair.stack_difference)}</span>')
    return f'<td class="verdict-cell small" data-verdict="{verdict}">{" ".join(parts)}</td>'


def _compare_page(
    session: Session, slug: str, trial_ids: list[int], approach_keys: list[str], across_stacks: bool
) -> dict[str, Any]:
    campaign = get_campaign(session, slug)
    selected = list(dict.fromkeys(trial_ids))
    comparison = None
    if len(selected) >= comparison_domain.MIN_TRIALS or approach_keys:
        comparison = comparison_domain.compare(session, campaign, selected, approach_keys, across_stacks)
    recent = trial_reads.list_trials(session, campaign=slug, limit=PICKER_TRIALS).rows
    listed = {r.trial.id for r in recent}
    return {
        "campaign": campaign,
        "comparison": comparison,
        "figure": trial_comparison(comparison) if comparison else None,
        "table": metric_table(comparison) if comparison else [],
        "colors": TRIAL_COLORS,
        "recent": recent,
        "selected": selected,
        "selected_elsewhere": [i for i in selected if i not in listed],
        "min_trials": comparison_domain.MIN_TRIALS,
        "max_trials": comparison_domain.MAX_TRIALS,
        "settle_pair": repeats.settle_pair(comparison) if comparison else None,
        "repeat_keys": repeats.repeat_keys(comparison) if comparison else [],
        "finding_words": statistics.FINDING_WORDS,
        "settles": repeats.open_settles(session, campaign),
        "settle_budget": repeats.DEFAULT_BUDGET,
    }


@router.get("/campaigns/{slug}/compare")
async def compare_page(
    request: Request,
    slug: str,
    operator: OperatorDep,
    trial: PageTrialIds = None,
    approach: PageApproachKeys = None,
    across_stacks: bool = False,
) -> HTMLResponse:
    take_feed_mark(request)  # before the read
    ctx = await app_state(request).db.read_in_tx(_compare_page, slug, trial or [], approach or [], across_stacks)
    # The page feed's refresh asks for the metrics alone (htmx sends HX-Request).
    block = "metrics" if request.headers.get("HX-Request") else None
    return render(request, "compare.html", ctx, block=block)


@router.post("/campaigns/{slug}/settle")
async def settle_form(
    request: Request,
    slug: str,
    operator: OperatorDep,
    form: Annotated[SettleForm, Form()],
) -> RedirectResponse:
    """The compare page's "Settle A vs B", the approach page's "Repeat" and the trial page's "Take the
    proposal and repeat" (`taking`: that trial's proposal, decided first): queue, then show the comparison."""
    a, b = form.a, form.b
    await start_settle(request.app, slug, a, b, form.budget, operator.name, form.metric, taking=form.taking)
    keys = f"approach={a}" + (f"&approach={b}" if b else "")
    target = f"/campaigns/{slug}/compare?{keys}" if b else f"/campaigns/{slug}/approaches/{a}"
    return RedirectResponse(target, status_code=303)
