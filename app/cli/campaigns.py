"""A campaign as a file and as a plan: `campaign export`, `import` and `plan`."""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import nullcontext
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from app.cli.common import board_engine, console, err, fail, get_settings, migrated_engine, session_scope

if TYPE_CHECKING:
    from sqlmodel import Session

    from app.config import Settings
    from app.models import Campaign

T = TypeVar("T")


def _on_campaign(slug: str, step: Callable[[Session, Campaign], T], settings: Settings | None = None) -> T:
    """`step` on the campaign `slug`, in one transaction; a domain refusal is the command's error."""
    from app.domain import campaigns
    from app.domain.errors import DomainError

    try:
        with session_scope(board_engine(settings or get_settings())) as session:
            return step(session, campaigns.get_campaign(session, slug))
    except DomainError as exc:
        fail(exc.message)


def export_cmd(
    slug: Annotated[str, typer.Argument(help="The campaign's slug.")],
    output: Annotated[Path | None, typer.Option("-o", "--output", help="File to write (default: stdout).")] = None,
    with_results: Annotated[
        bool, typer.Option("--with-results", help="Also the ended trials with their metrics, samples and stack.")
    ] = False,
) -> None:
    """Export a campaign to YAML (keep it in git; `campaign import` reads it back)."""
    from app.domain.campaign_files import export_stream
    from app.domain.errors import DomainError

    with session_scope(migrated_engine(get_settings()), write=False, snapshot=True) as session:
        pieces = export_stream(session, slug, with_results)
        try:
            first = next(pieces)  # an unknown campaign fails here, before a file is written
        except DomainError as exc:
            fail(exc.message)
        try:
            with output.open("w", encoding="utf-8") if output else nullcontext(sys.stdout) as out:
                for piece in chain([first], pieces):
                    out.write(piece)
        except OSError as exc:  # no such directory, not writable, disk full: one line, not a traceback
            fail(f"cannot write {output}: {exc.strerror or exc}", code=2)
    if output:
        err.print(f"wrote {output}")


def plan_cmd(
    slug: Annotated[str, typer.Argument(help="The campaign's slug.")],
    target: Annotated[
        list[str] | None, typer.Option("--target", "-t", help="A target version, COMPONENT=VERSION (repeat).")
    ] = None,
    runner: Annotated[int | None, typer.Option(help="Plan for this runner's stack (its id) instead.")] = None,
) -> None:
    """What to try next (the payoff ranking) and what an upgrade would re-open (docs/planning.md)."""
    from rich.table import Table

    from app.domain import campaigns, planning, scheduling
    from app.domain.errors import DomainError
    from app.domain.fingerprint import STACK_COMPONENTS

    try:
        with session_scope(migrated_engine(get_settings()), write=False) as session:
            campaign = campaigns.get_campaign(session, slug)
            ranked = scheduling.ranking(session, campaign)
            plan = planning.upgrade_plan(session, campaign, planning.target_of(session, target or [], runner))
            order = campaign.run_order
    except DomainError as exc:
        fail(exc.message)
    table = Table(title=f"What to try next (Run next follows the {order})", show_lines=True)
    for column in ("#", "approach", "score", "needs (us)", "expected (us)", "effort", "risk"):
        table.add_column(column)
    for n, r in enumerate(ranked, start=1):
        table.add_row(
            str(n),
            r.approach.title,
            f"{r.score:.3g}" if r.score is not None else "-",
            f"{r.needs.us:.3g}" if r.needs.us is not None else "-",
            f"{r.expected.t_ar_us:.3g} ({r.expected.source})" if r.expected else "-",
            f"{r.effort:g}",
            f"{r.risk.value:.0%}",
        )
    console.print(table)
    if ranked:
        console.print(f"next: {ranked[0].approach.title}: {planning.why_next(ranked)}", highlight=False)
    upgrades = Table(title="Closed verdicts per stack component")
    for column in ("component", "approach", "died on", "cause"):
        upgrades.add_column(column)
    for component, rows in plan.by_component.items():
        for x in rows:
            upgrades.add_row(
                STACK_COMPONENTS[component], x.approach.title, x.died_on(component) or "?", x.approach.reason
            )
    console.print(upgrades)
    if plan.target:
        change = ", ".join(f"{STACK_COMPONENTS[c]} {old or '?'} -> {new}" for c, old, new in plan.changes)
        console.print(f"target: {change or 'no change'}", highlight=False)
        for reopen in plan.reopens:
            console.print(f"  re-opens {reopen.closed.approach.title}: {reopen.why}", highlight=False)
        for u in plan.untouched:
            console.print(f"  leaves {u.closed.approach.title}: {u.why}", highlight=False)


def import_cmd(
    path: Annotated[Path, typer.Argument(help="A campaign YAML file ('-' for stdin).")],
    replace: Annotated[bool, typer.Option(help="Also delete approaches that the file does not list.")] = False,
) -> None:
    """Import a campaign file (YAML, or YAML gzip-compressed: .yaml.gz): create the campaign or bring it up to
    date; all or nothing."""
    from app.domain.campaign_files import campaign_file_text, import_campaign
    from app.domain.errors import DomainError

    settings = get_settings()
    limit = settings.max_campaign_file_bytes
    data = sys.stdin.buffer.read(limit + 1) if str(path) == "-" else _read(path, limit)
    if len(data) > limit:
        fail(f"{path}: larger than {limit} bytes (CAMPAIGN_MAX_CAMPAIGN_FILE_BYTES); nothing was imported")
    try:
        text = campaign_file_text(data, expanded_limit=settings.max_campaign_file_expanded_bytes)
    except DomainError as exc:
        fail(f"{path}: {exc.message}; nothing was imported", code=2)
    try:
        with session_scope(migrated_engine(get_settings())) as session:
            summary = import_campaign(session, text, actor="cli import", replace=replace)
    except DomainError as exc:
        fail(f"{path}: {exc.message}\nnothing was imported")
    console.print(summary.summary)


def _read(path: Path, limit: int) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read(limit + 1)
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror}", code=2)
    return b""


ActorOption = Annotated[str, typer.Option("--by", help="The name the campaign's history shows for this step.")]


def rename_cmd(
    slug: Annotated[str, typer.Argument(help="The campaign's slug now.")],
    new_slug: Annotated[str, typer.Argument(help="Its new slug (the old one's URLs redirect to it).")],
    by: ActorOption = "cli",
) -> None:
    """Rename a campaign's slug: its old URLs and share links keep working (they redirect)."""
    from pydantic import ValidationError

    from app.domain import lifecycle
    from app.schemas import CampaignRename

    try:
        data = CampaignRename(slug=new_slug)
    except ValidationError as exc:
        fail(f"{new_slug!r}: {exc.errors()[0]['msg']}", code=2)
    _on_campaign(slug, lambda session, campaign: lifecycle.rename(session, campaign, data, by))
    console.print(f"renamed {slug} -> {new_slug} (the old URLs redirect)", highlight=False)


def archive_cmd(slug: Annotated[str, typer.Argument(help="The campaign's slug.")], by: ActorOption = "cli") -> None:
    """Archive a campaign: read-only, off the front page, restorable. Refused while trials are queued or
    running: cancel them first (the page and the API can cancel them in the same step; the server tells
    their runners)."""
    from app.domain import lifecycle

    _on_campaign(slug, lambda session, campaign: lifecycle.archive(session, campaign, by))
    console.print(f"archived {slug}: read-only; `campaign restore {slug}` brings it back", highlight=False)


def restore_cmd(slug: Annotated[str, typer.Argument(help="The campaign's slug.")], by: ActorOption = "cli") -> None:
    """Restore an archived campaign: back on the front page, writable again."""
    from app.domain import lifecycle

    _on_campaign(slug, lambda session, campaign: lifecycle.restore(session, campaign, by))
    console.print(f"restored {slug}", highlight=False)


def delete_cmd(
    slug: Annotated[str, typer.Argument(help="The archived campaign's slug.")],
    confirm: Annotated[str, typer.Option("--confirm", help="The campaign's name, typed to confirm.")],
    by: ActorOption = "cli",
) -> None:
    """Delete an archived campaign for good, with its approaches, trials, logs, metrics, artifacts, share links
    and history (nothing else). `campaign export SLUG --with-results` first keeps a copy."""
    from app.domain import artifacts, lifecycle

    settings = get_settings()
    done = _on_campaign(slug, lambda session, campaign: lifecycle.delete(session, campaign, confirm, by), settings)
    store = artifacts.store_for(settings.data_dir)
    for sha in done.blobs:
        store.delete(sha)
    removed = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in done.removed.items())
    console.print(f"deleted {slug}: {removed}", highlight=False)


def settles_cmd(
    slug: Annotated[str, typer.Argument(help="The campaign's slug.")],
    approach: Annotated[
        str | None, typer.Option(help="Only this approach's (its open ones and newest ended one).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="As GET /api/campaigns/SLUG/settles gives it.")] = False,
) -> None:
    """Repeat / Settle progress: trials done of the most it may take, each side's interval so far."""
    import json

    from app.domain import campaigns, repeats
    from app.domain.errors import DomainError

    try:
        with session_scope(migrated_engine(get_settings()), write=False) as session:
            campaign = campaigns.get_campaign(session, slug)
            if approach is not None:
                found = repeats.approach_progress(session, campaigns.get_approach(session, campaign, approach))
            else:
                found = repeats.campaign_progress(session, campaign)
            rows = [repeats.progress_json(p) for p in found]
            lines = [repeats.progress_line(p) for p in found]
    except DomainError as exc:
        fail(exc.message)
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    for line in lines or ["no Repeat or Settle yet"]:
        print(line)


def history_cmd(
    slug: Annotated[str, typer.Argument(help="The campaign's slug.")],
    key: Annotated[
        str | None, typer.Argument(help="An approach's key: its decisions. Without it: the campaign's lifecycle.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=200, help="Decisions to show.")] = 20,
) -> None:
    """A campaign's lifecycle steps (renamed, archived, restored), newest first; with an approach's KEY, that
    approach's decisions, newest first, each with the trial events after it folded under it."""
    from app.domain import campaigns, history, lifecycle
    from app.domain.errors import DomainError

    try:
        with session_scope(migrated_engine(get_settings()), write=False) as session:
            campaign = campaigns.get_campaign(session, slug)
            if key is None:
                steps = [(e.at, e.kind, e.detail, e.actor) for e in lifecycle.history(session, campaign)]
            else:
                approach = campaigns.get_approach(session, campaign, key)
                groups, more = history.folded_history(session, approach, limit=limit)
                lines = history.history_lines(groups)
    except DomainError as exc:
        fail(exc.message)
    if key is None:
        for at, kind, detail, actor in steps:
            console.print(f"{at:%Y-%m-%d %H:%M}  {kind:9} {detail}  by {actor or '?'}", highlight=False)
        if not steps:
            print("no lifecycle steps yet (renamed, archived, restored)")
        return
    print("\n".join(lines))
    if more is not None:
        print(f"... older decisions: GET /api/campaigns/{slug}/approaches/{key}/decisions?before={more}")


def search_cmd(
    query: Annotated[str, typer.Argument(help='Words to find, e.g. "KeyError: 12" or a trial\'s #id.')],
    limit: Annotated[int, typer.Option(min=1, max=200)] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="As GET /api/search gives it.")] = False,
) -> None:
    """Search approaches, trials (parameters, logs) and verdicts across every campaign, best first."""
    import json

    from app.domain import search
    from app.domain.errors import DomainError

    try:
        with session_scope(migrated_engine(get_settings()), write=False) as session:
            hits = search.search(session, query, limit=limit)
    except DomainError as exc:
        fail(exc.message)
    if as_json:
        print(json.dumps([vars(h) for h in hits], indent=2))
        return
    for h in hits:
        snippet = h.snippet.replace(search.MARK_START, "[").replace(search.MARK_END, "]").replace("\n", " ")
        print(f"{h.kind:8} {h.campaign_slug}: {h.title} ({h.field}) {h.link}\n         {snippet}")
    if not hits:
        print("nothing matches")
