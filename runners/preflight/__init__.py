"""Preflight: cheap checks on the node before an SGLang server loads any weights.

Each check takes seconds. The first failing check ends the trial with its verdict proposal, the
stack components it is bound to and its own output, printed as one structured line
(`@@campaign-preflight {json}`, app/protocol/preflight.py, read by app/domain/signatures.py) after the check's output.

Checks are a registry a team can extend:

    from runners.preflight import Check, Outcome, register

    @register(applies=lambda ctx: "--enable-foo" in ctx.server_args)
    def foo_driver(ctx):
        ...
        return Outcome.failed("dead_end", "foo needs driver 560", bound_to=["driver"], output=text)

Built-in checks live in runners/preflight/checks.py; the GPU probes they start run under the
node's sglang interpreter (runners/preflight/probes.py). Standard library only here.
"""

from __future__ import annotations

from runners.preflight import checks as _builtin_checks  # noqa: F401  (registers the built-in checks)
from runners.preflight.registry import REGISTRY, Check, Context, Outcome, check_names, register, run_checks

__all__ = ["REGISTRY", "Check", "Context", "Outcome", "check_names", "register", "run_checks"]
