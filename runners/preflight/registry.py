"""The preflight registry: what a check sees (`Context`), what it gives (`Outcome`), `register`, and `run_checks`,
which prints the first failure's `@@campaign-preflight` line. The package (runners/preflight/__init__.py)
re-exports these and imports the built-in checks, which import this module: no import cycle."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.protocol.preflight import PROPOSABLE_STATUSES, format_preflight_line


@dataclass
class Context:
    """What a check may look at: the recipe's validated values and the environment the server gets."""

    values: dict[str, Any]
    env: dict[str, str]
    sglang_version: str | None = None
    timeout_s: float = 60.0

    @property
    def server_args(self) -> list[str]:
        return list(self.values.get("server_args") or [])

    @property
    def python(self) -> str:
        return self.values["sglang_python"]

    @property
    def tp_size(self) -> int:
        return int(self.values.get("tp_size") or 1)

    def has_flag(self, flag: str) -> bool:
        return any(a == flag or a.startswith(flag + "=") for a in self.server_args)

    @property
    def uses_cuda_graphs(self) -> bool:
        return not self.has_flag("--disable-cuda-graph")


@dataclass
class Outcome:
    ok: bool
    summary: str
    output: str = ""
    verdict: str | None = None
    cause: str | None = None
    bound_to: list[str] = field(default_factory=list)

    @classmethod
    def passed(cls, summary: str, output: str = "") -> Outcome:
        return cls(True, summary, output)

    @classmethod
    def failed(
        cls,
        verdict: str,
        cause: str,
        *,
        bound_to: list[str] | None = None,
        output: str = "",
        summary: str | None = None,
    ) -> Outcome:
        if verdict not in PROPOSABLE_STATUSES:
            raise ValueError(f"verdict must be one of {PROPOSABLE_STATUSES}, not {verdict!r}")
        return cls(False, summary or cause, output, verdict, cause, list(bound_to or []))


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[Context], Outcome]
    applies: Callable[[Context], bool]
    description: str


REGISTRY: dict[str, Check] = {}


def register(name: str | None = None, *, applies: Callable[[Context], bool] | None = None):
    """Decorator adding a check (a function Context -> Outcome) to the registry, in order."""

    def wrap(fn: Callable[[Context], Outcome]) -> Callable[[Context], Outcome]:
        check_name = name or fn.__name__
        if check_name in REGISTRY:
            raise ValueError(f"preflight check {check_name!r} is already registered")
        REGISTRY[check_name] = Check(
            check_name,
            fn,
            applies or (lambda _ctx: True),
            (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else "",
        )
        return fn

    return wrap


def check_names() -> list[str]:
    return list(REGISTRY)


def run_checks(ctx: Context, *, skip: list[str] | tuple[str, ...] = (), out=None) -> Outcome | None:
    """Run the applicable checks in order; print each result; return the first failure (None: all passed)."""
    out = out or sys.stdout
    unknown = sorted(set(skip) - set(REGISTRY))
    if unknown:
        raise ValueError(f"unknown preflight check(s) to skip: {', '.join(unknown)}; known: {', '.join(REGISTRY)}")
    for check in REGISTRY.values():
        if check.name in skip:
            out.write(f"preflight: {check.name}: skipped (asked by the approach)\n")
            continue
        if not check.applies(ctx):
            out.write(f"preflight: {check.name}: not needed by this approach\n")
            continue
        started = time.monotonic()
        try:
            outcome = check.run(ctx)
        except Exception as exc:
            outcome = Outcome.failed("inconclusive", f"the check itself failed: {type(exc).__name__}: {exc}")
        took = time.monotonic() - started
        if outcome.output:
            for line in outcome.output.rstrip("\n").splitlines():
                out.write(f"    {line}\n")
        if outcome.ok:
            out.write(f"preflight: {check.name}: ok ({outcome.summary}) in {took:.1f}s\n")
            out.flush()
            continue
        bound = ", ".join(_describe_bound(c, ctx) for c in outcome.bound_to)
        out.write(
            f"preflight: {check.name}: FAILED in {took:.1f}s: {outcome.summary}"
            f"{' (bound to ' + bound + ')' if bound else ''}\n"
        )
        out.write(
            format_preflight_line(
                {
                    "check": check.name,
                    "verdict": outcome.verdict,
                    "cause": outcome.cause,
                    "summary": outcome.summary,
                    "bound_to": outcome.bound_to,
                    "sglang_version": ctx.sglang_version,
                }
            )
            + "\n"
        )
        out.flush()
        return outcome
    out.flush()
    return None


def _describe_bound(component: str, ctx: Context) -> str:
    if component == "sglang" and ctx.sglang_version:
        return f"sglang {ctx.sglang_version}"
    return component


# The built-in checks register themselves (after the names above exist: they import them).
