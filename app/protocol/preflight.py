"""The preflight failure line: a failing check prints it (runners/preflight), the server's failure signatures
read it (app/domain/signatures.py). One line, `@@campaign-preflight {json}`. Standard library only."""

from __future__ import annotations

import json
from typing import Any

PREFLIGHT_PREFIX = "@@campaign-preflight "
# The verdicts a preflight failure may propose.
PROPOSABLE_STATUSES = ("dead_end", "deferred", "retest", "inconclusive")


def format_preflight_line(record: dict[str, Any]) -> str:
    """The line (without newline) for a failure record: check, verdict, cause, summary, bound_to, sglang_version."""
    return PREFLIGHT_PREFIX + json.dumps(record, sort_keys=True)


def parse_preflight_line(line: str) -> dict[str, Any] | None:
    """The failure record in a `@@campaign-preflight {json}` line, or None."""
    if not line.startswith(PREFLIGHT_PREFIX):
        return None
    try:
        obj = json.loads(line[len(PREFLIGHT_PREFIX) :])
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None
