"""A trial's log read offline: `campaign classify`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from app.cli.common import board_engine, console, fail, get_settings, session_scope
from app.protocol.metrics import MetricName


def classify(
    logfile: Annotated[str, typer.Argument(metavar="LOGFILE", help="A trial's log ('-' for stdin).")],
    exit_code: Annotated[int | None, typer.Option("--exit-code", help="The trial's exit code.")] = None,
    signal: Annotated[int | None, typer.Option("--signal", help="The signal that ended the trial.")] = None,
    timed_out: Annotated[
        bool, typer.Option("--timed-out", help="The trial ran past its time limit (the runner stopped it).")
    ] = False,
    baseline: Annotated[
        float | None,
        typer.Option(
            "--baseline",
            min=0.0,
            help="Baseline output throughput (tok/s): a finished trial below it is "
            "'slower than baseline' (read from the log's metric lines or bench_serving summary).",
        ),
    ] = None,
) -> None:
    """Match a log against the known failure signatures and print the proposed verdict.

    Exit code: 0 a signature matched, 1 none matched, 2 the log could not be read."""
    from rich.markup import escape

    from app.domain import fingerprint as stack
    from app.domain.signatures import classify as classify_log
    from app.domain.signatures import metrics_from_log
    from app.domain.verdicts import SIGNATURE_STATUS

    try:
        if logfile == "-":
            text = sys.stdin.buffer.read().decode("utf-8", errors="replace")
        else:
            text = Path(logfile).read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        fail(f"cannot read {logfile}: {exc.strerror or exc}", code=2)
    metrics = metrics_from_log(text) if baseline is not None else None
    if metrics is not None and not any(m["name"] == MetricName.OUTPUT_THROUGHPUT for m in metrics):
        fail(
            f"--baseline: no output throughput in {'stdin' if logfile == '-' else logfile} "
            "(no metric line and no bench_serving 'Output token throughput (tok/s):' summary)",
            code=2,
        )
    found = classify_log(
        text,
        exit_code=exit_code,
        signal=signal,
        metrics=metrics,
        baseline={MetricName.OUTPUT_THROUGHPUT: baseline} if baseline is not None else None,
        timed_out=timed_out,
    )
    if found is None:
        console.print(
            "[yellow]no known failure signature[/yellow] in "
            f"{'stdin' if logfile == '-' else escape(logfile)}: read the log (a person decides the verdict)",
            soft_wrap=True,
            highlight=False,
        )
        raise typer.Exit(1)
    status = SIGNATURE_STATUS.get(found.verdict)
    bound = stack.bound_components(found.bound_to)
    lines = [
        ("cause", f"[bold]{escape(found.cause)}[/bold]"),
        ("signature", escape(found.signature)),
        (
            "proposed",
            f"[bold]{escape(found.verdict)}[/bold]"
            + (f" (approach status: {status.value})" if status is not None else ""),
        ),
        ("reason", escape(found.reason)),
        (
            "bound to",
            ", ".join(stack.STACK_COMPONENTS[c] for c in bound)
            if bound
            else "[dim]not bound (no stack change would change it)[/dim]",
        ),
        ("evidence", escape(found.evidence_line.strip()) if found.evidence_line else "[dim]none in the log[/dim]"),
    ]
    for label, value in lines:
        console.print(f"[cyan]{label + ':':<11}[/cyan]{value}", soft_wrap=True, highlight=False)


def trials_cmd(
    campaign: Annotated[str | None, typer.Option(help="A campaign's slug.")] = None,
    approach: Annotated[str | None, typer.Option(help="An approach's key (in --campaign, or in any).")] = None,
    state: Annotated[str | None, typer.Option(help="queued, running, succeeded, failed, ...")] = None,
    runner: Annotated[str | None, typer.Option(help="A runner's name.")] = None,
    proposal: Annotated[str | None, typer.Option(help="The verdict its failure signature proposed; 'none'.")] = None,
    tag: Annotated[str | None, typer.Option(help="A metric tag or condition, name=value (world_size=8).")] = None,
    since: Annotated[str | None, typer.Option(help="Created at or after (ISO 8601 date or time).")] = None,
    until: Annotated[str | None, typer.Option(help="Created before (ISO 8601 date or time).")] = None,
    requested_by: Annotated[str | None, typer.Option("--requested-by", help="Who started it.")] = None,
    sort: Annotated[str, typer.Option(help="A column, a leading - for descending.")] = "-id",
    page: Annotated[int, typer.Option(min=1)] = 1,
    limit: Annotated[int, typer.Option(min=1, max=200, help="Trials per page.")] = 50,
    output: Annotated[
        str, typer.Option("--format", help="table (one page), csv or json (every trial the filter finds).")
    ] = "table",
) -> None:
    """Trials, filtered as on the trials page and `GET /api/trials` (the same filter), sorted, paged."""
    from pydantic import ValidationError
    from rich.markup import escape
    from rich.table import Table

    from app.domain import trial_reads
    from app.domain.errors import DomainError
    from app.schemas import TrialFilter

    if output not in ("table", "csv", "json"):
        fail("--format: table, csv or json", code=2)
    given = dict(campaign=campaign, approach=approach, state=state, runner=runner, proposal=proposal, tag=tag)
    given |= dict(since=since, until=until, requested_by=requested_by)
    try:
        filters = TrialFilter.model_validate({k: v for k, v in given.items() if v is not None})
    except ValidationError as exc:
        err = exc.errors()[0]
        fail(f"--{'.'.join(str(p) for p in err['loc']).replace('_', '-')}: {err['msg']}", code=2)
    try:
        with session_scope(board_engine(get_settings()), write=False, snapshot=True) as session:
            if output != "table":
                for piece in trial_reads.export_stream(session, filters, sort, output):
                    sys.stdout.write(piece)
                if output == "json":
                    sys.stdout.write("\n")
                return
            found = trial_reads.search_trials(session, filters, sort=sort, page=page, per_page=limit)
            rows = [trial_reads.summary(r) for r in found.rows]
    except DomainError as exc:
        fail(exc.message)
    table = Table(title=f"{found.total:,} trial(s), page {found.page} of {found.pages}")
    for column in ("trial", "campaign", "approach", "state", "proposed", "runner", "started by", "created"):
        table.add_column(column)
    for r in rows:
        table.add_row(
            f"#{r['id']}",
            escape(r["campaign"]),
            escape(r["approach"]),
            r["state"],
            r["proposed"],
            escape(r["runner"] or ""),
            escape(r["requested_by"]),
            f"{r['created_at']:%Y-%m-%d %H:%M}",
        )
    console.print(table)
