"""Campaign replay: `campaign replay start`, `list` and `show`."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from app.cli.common import console, fail, get_settings, migrated_engine, session_scope
from app.domain.units import plural

replay_cli = typer.Typer(
    help="Campaign replay: re-run the closed verdicts a runner's stack may change (docs/planning.md, Replay).",
    no_args_is_help=True,
)


def _print_replay(report: Any) -> None:
    from rich.table import Table

    r = report.replay
    console.print(
        f"replay #{r.id} on {r.runner_name} ({report.runner_stack}): {r.state}, {report.ended} of "
        f"{plural(report.queued, 'trial')} ended; started by {r.requested_by or '?'} at {r.created_at:%Y-%m-%d %H:%M}",
        highlight=False,
    )
    table = Table(show_lines=True)
    for column in ("approach", "before", "trial", "after", "measured"):
        table.add_column(column)
    for row in report.rows:
        if row.skipped:
            table.add_row(row.key, row.before_status, "-", f"not replayed: {row.skipped}", "")
            continue
        point = next((p for p in row.points if p.verdict), None)
        measured = ""
        if point is not None and point.ratio is not None:
            interval = (
                f" [{point.low:.3g}, {point.high:.3g}]" if point.low is not None and point.high is not None else ""
            )
            measured = f"{row.metric} {point.label} x{point.ratio:.3g}{interval} {point.verdict}".replace("  ", " ")
        after = row.after_status or (f"proposed {row.proposed}" if row.proposed else "no verdict yet")
        table.add_row(
            row.key,
            f"{row.before_status} on {row.before_stack}" if row.before_stack else row.before_status,
            f"#{row.trial_id} {row.trial_state}" if row.trial_id is not None else "-",
            after + (" (changed)" if row.changed else ""),
            measured,
        )
    console.print(table)


@replay_cli.command("start")
def replay_start_cmd(
    slug: Annotated[str, typer.Argument(help="The campaign's slug.")],
    runner: Annotated[int, typer.Option("--runner", help="The runner whose stack to replay on (its id).")],
) -> None:
    """Replay on a runner: queue, for that runner only and in payoff order, one trial of every approach whose
    verdict is bound to a component in which its stack differs. The runner takes the first when it next looks
    at the queue (it connects, or a trial of it ends); the campaign page's button dispatches at once."""
    from app.domain import campaigns, replay
    from app.domain.errors import DomainError

    try:
        with session_scope(migrated_engine(get_settings())) as session:
            campaign = campaigns.get_campaign(session, slug)
            row, _queued = replay.start(session, campaign, runner, "cli")
            report = replay.report(session, campaign, row)
    except DomainError as exc:
        fail(exc.message)
    _print_replay(report)


@replay_cli.command("list")
def replay_list_cmd(slug: Annotated[str, typer.Argument(help="The campaign's slug.")]) -> None:
    """The campaign's replays, newest first, with their trial counts."""
    from app.domain import campaigns, replay
    from app.domain.errors import DomainError

    try:
        with session_scope(migrated_engine(get_settings()), write=False) as session:
            rows = replay.summaries(session, campaigns.get_campaign(session, slug), limit=1000)
    except DomainError as exc:
        fail(exc.message)
    if not rows:
        console.print(f"no replays in {slug}", highlight=False)
    for x in rows:
        r = x.replay
        console.print(
            f"#{r.id}  {r.state:<9} {r.runner_name}  {x.ended}/{plural(x.queued, 'trial')} ended  "
            f"by {r.requested_by or '?'} at {r.created_at:%Y-%m-%d %H:%M}",
            highlight=False,
        )


@replay_cli.command("show")
def replay_show_cmd(
    slug: Annotated[str, typer.Argument(help="The campaign's slug.")],
    replay_id: Annotated[int, typer.Argument(help="The replay's id (`campaign replay list`).")],
) -> None:
    """A replay's report: per approach, before and after, what changed, the headline metric's statistics."""
    from app.domain import campaigns, replay
    from app.domain.errors import DomainError

    try:
        with session_scope(migrated_engine(get_settings()), write=False) as session:
            campaign = campaigns.get_campaign(session, slug)
            report = replay.report(session, campaign, replay.get(session, campaign, replay_id))
    except DomainError as exc:
        fail(exc.message)
    _print_replay(report)
