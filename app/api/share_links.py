"""Share links, JSON: list a campaign's links, create one (its URL is in the answer), revoke one.
The pages for the same operations are app/web/share.py; the rules are app/domain/sharing.py."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from app.deps import OperatorDep, RowId, SessionDep, public_base_url, require_operator
from app.domain import campaigns
from app.domain.sharing import create_share_link, get_share_link, list_share_links, revoke_share_link, share_url
from app.models import ShareLink
from app.schemas import ShareLinkCreate, ShareLinkPublic
from app.state import app_state

router = APIRouter(prefix="/api", tags=["share links"], dependencies=[Depends(require_operator)])


def _public(request: Request, link: ShareLink) -> ShareLinkPublic:
    secret = app_state(request).settings.resolved_secret_key()
    url = share_url(link, secret, public_base_url(request))
    return ShareLinkPublic(**link.model_dump(include=set(ShareLinkPublic.model_fields) - {"url"}), url=url)


@router.get("/campaigns/{slug}/share-links", response_model=list[ShareLinkPublic])
def list_links(request: Request, slug: str, session: SessionDep) -> list[ShareLinkPublic]:
    """Newest first, revoked ones included (with a null url)."""
    campaign = campaigns.get_campaign(session, slug)
    return [_public(request, link) for link in list_share_links(session, campaign)]


@router.post("/campaigns/{slug}/share-links", response_model=ShareLinkPublic, status_code=201)
def create_link(
    request: Request, slug: str, data: ShareLinkCreate, session: SessionDep, operator: OperatorDep
) -> ShareLinkPublic:
    link = create_share_link(session, campaigns.get_campaign(session, slug), data.name, operator.name)
    return _public(request, link)


@router.post("/campaigns/{slug}/share-links/{link_id}/revoke", response_model=ShareLinkPublic)
def revoke_link(request: Request, slug: str, link_id: RowId, session: SessionDep) -> ShareLinkPublic:
    """The link stops working at once; revoking twice is harmless."""
    campaign = campaigns.get_campaign(session, slug)
    return _public(request, revoke_share_link(session, get_share_link(session, campaign, link_id)))
