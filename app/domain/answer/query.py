"""`AnswerQuery`: everything a reader may ask of the answer, in one value. The condition set, the what-if
inputs and the what-if allreduce latency t_ar; `read_answer(session, campaign, query)` computes the whole answer
with all of them laid over it (inside the domain, inside the cache), so every page, the API and the CLI get the
same answer for the same query. A query is frozen and hashable: it is part of the answer cache's key.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.domain.answer.inputs import WhatIf


@dataclass(frozen=True)
class AnswerQuery:
    """What a reader asks: `conditions` (a `Conditions.key`; None or unknown: the default set), `what_if` (input
    values tried in place of the campaign's) and `t_ar_us` (an allreduce latency tried in place of every measured
    and reported one: the report is answered with it alone)."""

    conditions: str | None = None
    what_if: WhatIf = field(default_factory=WhatIf)
    t_ar_us: float | None = None
