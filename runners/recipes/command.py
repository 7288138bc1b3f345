"""Run a command and turn regex matches in its output into metric lines.

    python -m runners.recipes.command --metric 'tok_s=tok/s=throughput: ([0-9.]+)' -- ./bench --fast

The command runs as this wrapper's child, in the same process group (a runner that signals
the group reaches both). Its stdout and stderr pass through line by line, unbuffered, to the
wrapper's stdout and stderr; each line that matches a `--metric NAME=UNIT=REGEX` also yields a
metric line (value = the regex's first group). SIGTERM/SIGINT are forwarded to the child.
The exit code is the child's (128+N when a signal N ended it).
"""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any, TextIO

from app.protocol.metrics import emit
from app.protocol.recipes import RecipeError
from runners.recipes import Recipe, module_argv

PROG = "runners.recipes.command"


def validate_metrics(metrics: Any) -> dict[str, tuple[str, re.Pattern[str]]]:
    """params.metrics {"name": {"regex": ..., "unit": ...}} -> {name: (unit, compiled regex)}."""
    if not isinstance(metrics, dict):
        raise RecipeError('params.metrics: must be a mapping {"name": {"regex": "...", "unit": "..."}}')
    out: dict[str, tuple[str, re.Pattern[str]]] = {}
    for name, spec in metrics.items():
        where = f"params.metrics.{name}"
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.:-]*", name):
            raise RecipeError(f"{where}: metric name must be an identifier (letters, digits, _ . : -)")
        if not isinstance(spec, dict) or not isinstance(spec.get("regex"), str):
            raise RecipeError(f"{where}.regex: must be a regular expression string")
        unit = spec.get("unit", "")
        if not isinstance(unit, str) or "=" in unit:
            raise RecipeError(f"{where}.unit: must be a string without '='")
        unknown = set(spec) - {"regex", "unit"}
        if unknown:
            raise RecipeError(f"{where}.{sorted(unknown)[0]}: unknown key; expected regex, unit")
        try:
            pattern = re.compile(spec["regex"])
        except re.error as exc:
            raise RecipeError(f"{where}.regex: not a valid regular expression: {exc}") from None
        if pattern.groups < 1:
            raise RecipeError(f"{where}.regex: needs a capture group for the value, e.g. ([0-9.]+)")
        out[name] = (unit, pattern)
    return out


def metric_flags(metrics: dict[str, Any]) -> list[str]:
    """The wrapper's `--metric NAME=UNIT=REGEX` flags for validated params.metrics."""
    validate_metrics(metrics)
    flags: list[str] = []
    for name, spec in metrics.items():
        flags += ["--metric", f"{name}={spec.get('unit', '')}={spec['regex']}"]
    return flags


def validate(params: dict[str, Any]) -> dict[str, Any]:
    """params {"argv": [...], "metrics": {...}} (metrics optional). Raises RecipeError."""
    argv = params.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise RecipeError("params.argv: must be a non-empty list of strings")
    unknown = sorted(set(params) - {"argv", "metrics"})
    if unknown:
        raise RecipeError(f"params.{unknown[0]}: unknown parameter; expected argv, metrics")
    metrics = params.get("metrics") or {}
    validate_metrics(metrics)
    return {"argv": list(argv), "metrics": metrics}


def launch_argv(values: dict[str, Any], python: str) -> list[str]:
    """The argv as given; with metrics, wrapped in this module, which turns matches into metric lines."""
    if not values["metrics"]:
        return list(values["argv"])
    return module_argv(python, PROG, [*metric_flags(values["metrics"]), "--", *values["argv"]])


# A plain command gets the recipe's env as given (no SAFE_ENV default: it may not be a GPU program).
RECIPE = Recipe(spec=(), validate=validate, argv=launch_argv, safe_env=False)


def _parse_metric_flag(text: str) -> tuple[str, dict[str, str]]:
    parts = text.split("=", 2)
    if len(parts) != 3:
        raise RecipeError(f"--metric {text!r}: expected NAME=UNIT=REGEX (UNIT may be empty)")
    return parts[0], {"unit": parts[1], "regex": parts[2]}


def _pump(src: TextIO, dst: TextIO, metrics: dict[str, tuple[str, re.Pattern[str]]], lock: threading.Lock) -> None:
    for line in iter(src.readline, ""):
        with lock:
            dst.write(line)
            dst.flush()
            for name, (unit, pattern) in metrics.items():
                for match in pattern.finditer(line):
                    try:
                        value = float(match.group(1))
                    except (TypeError, ValueError):
                        continue
                    emit(name, value, unit)
    src.close()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        at = argv.index("--")
        own, child_argv = argv[:at], argv[at + 1 :]
    else:
        own, child_argv = argv, []
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__.splitlines()[0], usage=f"{PROG} [--metric NAME=UNIT=REGEX ...] -- ARGV..."
    )
    parser.add_argument("--metric", action="append", default=[], help="NAME=UNIT=REGEX; value = first group")
    ns = parser.parse_args(own)
    if not child_argv:
        parser.exit(2, f"{PROG}: error: no command given after --\n")
    try:
        metrics = validate_metrics(dict(_parse_metric_flag(m) for m in ns.metric))
    except RecipeError as exc:
        parser.exit(2, f"{PROG}: error: {exc}\n")
    # The handlers go in before the child exists: a SIGTERM / SIGINT between the spawn and the handlers
    # would end this wrapper with its default action and leave the child running, unowned. One that comes
    # before the spawn is kept (and the child never started); one during it is forwarded once it exists.
    held: list[int] = []
    spawned: list[subprocess.Popen[str]] = []

    def forward(signum: int, _frame: Any) -> None:
        if not spawned:
            held.append(signum)
        elif spawned[0].poll() is None:
            spawned[0].send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    if held:
        print(f"{PROG}: signal {held[0]} before the command started: not started", file=sys.stderr, flush=True)
        return 128 + held[0]
    try:
        spawned.append(
            subprocess.Popen(
                child_argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1, errors="replace"
            )
        )
    except OSError as exc:
        print(f"{PROG}: error: cannot start {child_argv[0]!r}: {exc}", file=sys.stderr, flush=True)
        return 127
    child = spawned[0]
    for signum in held:  # came while it was being spawned: it gets them now
        forward(signum, None)
    lock = threading.Lock()
    pumps = [
        threading.Thread(target=_pump, args=(child.stdout, sys.stdout, metrics, lock), daemon=True),
        threading.Thread(target=_pump, args=(child.stderr, sys.stderr, metrics, lock), daemon=True),
    ]
    for pump in pumps:
        pump.start()
    code = child.wait()
    for pump in pumps:
        pump.join(timeout=5)
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
