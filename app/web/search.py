"""Search (app/domain/search.py): the navigation's box, the results page, and the log chunk a log hit links to,
its matched line anchored. Any logged-in person; share links give no search."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from app.deps import RowId, SessionDep, require_operator
from app.domain import search, trials
from app.domain.errors import Invalid, NotFound
from app.web.render import render

router = APIRouter(include_in_schema=False, dependencies=[Depends(require_operator)])


@router.get("/search")
def search_page(
    request: Request, session: SessionDep, q: Annotated[str, Query(max_length=10 * search.MAX_QUERY)] = ""
) -> Response:
    """The results page; a query past MAX_QUERY is the page's own error in words (the box does not cut what is
    typed: tests/security/test_request_shapes.py), past 10 times that the request is refused."""
    hits, error = [], ""
    if q.strip():
        try:
            hits = search.search(session, q)
        except Invalid as exc:
            error = exc.message
    return render(request, "search.html", {"q": q, "hits": hits, "error": error})


@router.get("/trials/{trial_id}/log/{seq}")
def log_chunk_page(
    request: Request, session: SessionDep, trial_id: RowId, seq: int, q: Annotated[str, Query(max_length=200)] = ""
) -> Response:
    """One stored chunk of a trial's log, a line a row (`#L<n>`), the searched words marked."""
    trial = trials.get_trial(session, trial_id)
    chunk = search.log_chunk(session, trial_id, seq)
    if chunk is None:
        raise NotFound(f"No log chunk {seq} of trial #{trial_id} (trimmed, or not stored).")
    words = search.words_of(q)
    lines = [search.mark(line, words, width=10**6) if words else line for line in chunk.data.splitlines()]
    return render(request, "log_chunk.html", {"trial": trial, "chunk": chunk, "lines": lines, "q": q})
