"""Search as JSON (app/domain/search.py): any logged-in person, across every campaign."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from app.deps import SessionDep, require_operator
from app.domain import search

router = APIRouter(prefix="/api", tags=["search"], dependencies=[Depends(require_operator)])


class HitPublic(BaseModel):
    kind: str = Field(description="approach, verdict, trial or log")
    campaign: str = Field(description="The campaign's slug.")
    title: str
    field: str = Field(description="The field it matched (evidence, reason, parameters, ...) or the log line.")
    snippet: str = Field(
        description=f"Text around the match; matched words between {search.MARK_START!r} and {search.MARK_END!r}."
    )
    link: str = Field(description="A path on the board to the field or the log line.")
    score: float = Field(description="Higher is better (the database's rank).")


@router.get("/search", response_model=list[HitPublic])
def api_search(
    session: SessionDep,
    q: Annotated[str, Query(min_length=1, max_length=search.MAX_QUERY)],
    limit: Annotated[int, Query(ge=1, le=200)] = search.LIMIT,
) -> list[HitPublic]:
    """Approaches, trials (id, parameters, log text) and verdicts matching every word of `q`, best first."""
    return [
        HitPublic(
            kind=h.kind,
            campaign=h.campaign_slug,
            title=h.title,
            field=h.field,
            snippet=h.snippet,
            link=h.link,
            score=h.score,
        )
        for h in search.search(session, q, limit=limit)
    ]
