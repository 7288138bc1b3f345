"""A trial's log read offline: `campaign classify`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from app.cli.common import console, fail
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
