"""The demo campaigns, shipped as campaign files in app/demo/ and loaded through the importer."""

from __future__ import annotations

from pathlib import Path

from sqlmodel import Session, select

from app.domain.campaign_files import import_campaign, parse_campaign_file
from app.models import Campaign

DEMO_DIR = Path(__file__).resolve().parent.parent / "demo"


def demo_files() -> list[Path]:
    return sorted(DEMO_DIR.glob("*.yaml"))


def load_demo(session: Session) -> list[str]:
    """Load each demo campaign that is not there yet. Idempotent: a loaded campaign is left as
    the team has changed it, never reset."""
    lines = []
    for path in demo_files():
        text = path.read_text()
        slug = parse_campaign_file(text).campaign.slug
        if session.exec(select(Campaign).where(Campaign.slug == slug)).first():
            lines.append(f"demo campaign {slug!r} is already loaded")
            continue
        lines.append(import_campaign(session, text, actor="demo").summary)
    return lines
