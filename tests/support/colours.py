"""The status colours as static/app.css defines them (`--status-<name>: #rrggbb`), once each."""

from __future__ import annotations

import re

from app.config import resource_dir

CSS = (resource_dir("static") / "app.css").read_text()


def colours() -> dict[str, str]:
    found = re.findall(r"--status-([a-z_]+):\s*(#[0-9a-f]{6})", CSS)
    assert len(found) == len({name for name, _ in found}), "a status colour is defined twice"
    return dict(found)
