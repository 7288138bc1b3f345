"""The committed results campaigns (docs/results/<slug>.yaml, each file named by its campaign's slug), imported
into a test's database the way `campaign import` reads them."""

from __future__ import annotations

from collections.abc import Sequence

from sqlmodel import Session

from app.domain import campaigns
from app.domain.campaign_files import import_campaign
from app.models import Campaign
from tests.support.paths import ROOT

RESULTS = ROOT / "docs" / "results"
# The accept rates the answer tests read these campaigns at (none of the files sets them).
ALPHAS = [0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]


def import_results(session: Session, slug: str, alphas: Sequence[float] | None = None) -> Campaign:
    """docs/results/<slug>.yaml imported and flushed: its campaign, accepting `alphas` when given."""
    import_campaign(session, (RESULTS / f"{slug}.yaml").read_text(), actor="test")
    session.flush()
    campaign = campaigns.get_campaign(session, slug)
    if alphas is not None:
        campaign.accept_alphas = list(alphas)
        session.flush()
    return campaign
