"""Share links (read-only status pages for stakeholders) and the status they show.

A link's URL carries a token signed with the app secret: the share id and its nonce. Resolving
refuses a bad signature, an unknown id, a wrong nonce and a revoked link alike, with NotFound,
so a guessed, altered or revoked link is indistinguishable from one that never existed.

The status is built from a whitelist of public fields: titles, statuses, verdict reasons, stack
versions and measured figures. Recipes, commands, environment, evidence text, runner details and
actor names never enter it. Replays (`public_replays`) show their stacks and rows, not who started
them nor the runner's name.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeSerializer
from sqlmodel import Session, col, select

from app.domain import replay
from app.domain.answer import (
    ApproachBreakEven,
    ApproachPoint,
    CpuFloor,
    ProfitabilityReport,
    ThroughputRow,
    stack_summary,
)
from app.domain.campaigns import status_counts
from app.domain.errors import Invalid, NotFound
from app.domain.fingerprint import describe_binding
from app.domain.planning import run_next_order
from app.domain.scheduling import candidates
from app.models import Approach, ApproachStatus, Campaign, ShareLink, utcnow

_SALT = "campaign-board-share"
NOT_FOUND = "This share link is not valid: it may have been revoked. Ask the campaign's team for a new one."


def _serializer(secret_key: str) -> URLSafeSerializer:
    return URLSafeSerializer(secret_key, salt=_SALT)


def share_token(link: ShareLink, secret_key: str) -> str:
    return _serializer(secret_key).dumps({"id": link.id, "n": link.nonce})


def share_url(link: ShareLink, secret_key: str, base_url: str) -> str | None:
    """The status page's address, or None once the link is revoked."""
    return None if link.revoked_at is not None else f"{base_url.rstrip('/')}/s/{share_token(link, secret_key)}"


def create_share_link(session: Session, campaign: Campaign, name: str, actor: str) -> ShareLink:
    name = name.strip()
    if len(name) > 120:
        raise Invalid("A share link's name is at most 120 characters.", field="name")
    assert campaign.id is not None  # a stored campaign
    link = ShareLink(
        campaign_id=campaign.id, name=name or "status page", nonce=secrets.token_urlsafe(16), created_by=actor
    )
    session.add(link)
    session.flush()
    return link


def list_share_links(session: Session, campaign: Campaign) -> list[ShareLink]:
    return list(
        session.exec(
            select(ShareLink)
            .where(ShareLink.campaign_id == campaign.id)
            .order_by(col(ShareLink.created_at).desc(), col(ShareLink.id).desc())
        )
    )


def get_share_link(session: Session, campaign: Campaign, link_id: int) -> ShareLink:
    link = session.get(ShareLink, link_id)
    if link is None or link.campaign_id != campaign.id:
        raise NotFound(f"No share link #{link_id} in campaign {campaign.slug!r}.")
    return link


def revoke_share_link(session: Session, link: ShareLink) -> ShareLink:
    """Revoke for good: the token stops working at once. Revoking twice is harmless."""
    if link.revoked_at is None:
        link.revoked_at = utcnow()
        session.add(link)
        session.flush()
    return link


def resolve_share_token(session: Session, token: str, secret_key: str) -> tuple[ShareLink, Campaign]:
    """The live link and its campaign, or NotFound (bad signature, unknown, wrong nonce, revoked)."""
    try:
        data = _serializer(secret_key).loads(token)
    except BadSignature:
        raise NotFound(NOT_FOUND) from None
    if not isinstance(data, dict) or not isinstance(data.get("id"), int) or not isinstance(data.get("n"), str):
        raise NotFound(NOT_FOUND)
    link = session.get(ShareLink, data["id"])
    if link is None or link.revoked_at is not None or not secrets.compare_digest(link.nonce, data["n"]):
        raise NotFound(NOT_FOUND)
    campaign = session.get(Campaign, link.campaign_id)
    if campaign is None:
        raise NotFound(NOT_FOUND)
    return link, campaign


# ---- what the status page shows ---------------------------------------------------------------


@dataclass(frozen=True)
class ClosedApproach:
    """A dead end (or deferred approach) with its reason and the stack the verdict holds for."""

    title: str
    status: str
    reason: str
    stack: str
    bound_to: str


@dataclass(frozen=True)
class StatusReport:
    campaign_name: str
    counts: dict[str, int]
    total: int
    baseline_tok_s: float | None
    best: ThroughputRow | None
    best_vs_baseline: float | None  # best / baseline - 1
    speculative: bool  # the campaign asks "is EAGLE-3 profitable?"; else it is a latency comparison
    headline: ApproachBreakEven | None  # does speculation pay now (ProfitabilityReport.headline)
    # where each other approach or reported figure would move that, lowest tau* first
    others: tuple[ApproachBreakEven, ...]
    break_even_t_ar_us: float | None
    unknown: tuple[str, ...]  # the costs tau* counts as zero while they are unknown
    world_1: bool  # the verify steps measured ran at world size 1: no allreduce, no curve over t_ar
    accept_length: float | None
    accept_source: str
    fastest: ApproachPoint | None  # the lowest measured t_ar (latency comparison)
    verify_kib: int
    cpu_floor: tuple[CpuFloor, ...]
    missing: tuple[str, ...]  # what the model lacks (the what only: "how" may name commands)
    next_up: str | None
    dead_ends: tuple[ClosedApproach, ...]
    deferred: tuple[ClosedApproach, ...]


def _next_up(session: Session, campaign: Campaign, rows: list) -> str | None:
    """What "Run next candidate" would pick (runner availability aside); else the first untested approach."""
    runnable = run_next_order(session, campaign, candidates(session, campaign))
    if runnable:
        return runnable[0].title
    return next((a.title for a in rows if a.status == ApproachStatus.untested), None)


def status_report(
    session: Session,
    campaign: Campaign,
    profitability: ProfitabilityReport,
    throughput: list[ThroughputRow],
    rows: list[Approach],
) -> StatusReport:
    baseline = profitability.inputs.baseline_tok_s.value
    best = max((r for r in throughput if r.tok_s is not None), key=lambda r: r.tok_s or 0, default=None)
    costs = profitability.costs
    curve = profitability.curve

    def closed(status: ApproachStatus) -> tuple[ClosedApproach, ...]:
        return tuple(
            ClosedApproach(
                a.title,
                a.status,
                a.reason,
                stack_summary(a.verdict_fingerprint),
                describe_binding(a.bound_to, a.verdict_fingerprint) or "",
            )
            for a in rows
            if a.status == status
        )

    return StatusReport(
        campaign_name=campaign.name,
        counts=status_counts(rows),
        total=len(rows),
        baseline_tok_s=baseline,
        best=best,
        best_vs_baseline=(best.tok_s / baseline - 1) if best and best.tok_s and baseline else None,
        speculative=profitability.speculative,
        headline=profitability.headline,
        others=profitability.others,
        break_even_t_ar_us=costs.break_even_t_ar_us if costs else None,
        unknown=curve.unknown if curve else (),
        world_1=profitability.world_1,
        accept_length=profitability.inputs.accept_length.value,
        accept_source=profitability.inputs.accept_length.source,
        fastest=profitability.fastest,
        verify_kib=profitability.inputs.verify_bytes // 1024,
        cpu_floor=profitability.cpu_floor,
        missing=tuple(m.what for m in profitability.missing),
        next_up=_next_up(session, campaign, rows),
        dead_ends=closed(ApproachStatus.dead_end),
        deferred=closed(ApproachStatus.deferred),
    )


# ---- replays on the status page -------------------------------------------------------------------

PUBLIC_REPLAYS = 5  # the latest replays the status page shows, each with its report


@dataclass(frozen=True)
class PublicReplayRow:
    title: str
    before_status: str
    before_reason: str
    before_stack: str
    retest: str
    trial_state: str | None
    proposed: str | None
    after_status: str | None
    changed: bool
    skipped: str
    measured: str  # the headline metric's first point: "allreduce_latency_us x0.8 [0.79, 0.81] faster"; "" when none


@dataclass(frozen=True)
class PublicReplay:
    number: int
    state: str
    runner_stack: str
    started_at: object
    ended_at: object
    trials: int
    ended: int
    rows: tuple[PublicReplayRow, ...]


def _measured(row: replay.Row) -> str:
    point = next((p for p in row.points if p.verdict and p.ratio is not None), None)
    if point is None or row.metric is None:
        return ""
    where = f" {point.label}" if point.label else ""
    interval = f" [{point.low:.3g}, {point.high:.3g}]" if point.low is not None and point.high is not None else ""
    return f"{row.metric}{where} x{point.ratio:.3g}{interval} {point.verdict}"


def public_replays(session: Session, campaign: Campaign, limit: int = PUBLIC_REPLAYS) -> tuple[PublicReplay, ...]:
    """The campaign's latest replays, newest first, with their reports: stacks, statuses, verdict reasons and
    figures only (not the runner's name nor who started it)."""
    out = []
    for r in replay.of_campaign(session, campaign)[:limit]:
        report = replay.report(session, campaign, r)
        rows = tuple(
            PublicReplayRow(
                row.title,
                row.before_status,
                row.before_reason,
                row.before_stack,
                row.retest,
                row.trial_state,
                row.proposed,
                row.after_status,
                row.changed,
                row.skipped,
                _measured(row),
            )
            for row in report.rows
        )
        out.append(
            PublicReplay(
                r.id or 0, r.state, report.runner_stack, r.created_at, r.ended_at, report.queued, report.ended, rows
            )
        )
    return tuple(out)
