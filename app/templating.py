"""Jinja2 templates (full pages or one block for htmx) and the pinned front-end assets."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import plotly
from jinja2_fragments.fastapi import Jinja2Blocks

from app import __version__
from app.config import resource_dir
from app.models import ACTIVE_TRIAL_STATES, TERMINAL_TRIAL_STATES
from app.security import CSRF_FORM_FIELD, CSRF_HEADER
from app.services.events import feed_attributes

HTMX_VERSION = "2.0.11"
SWAGGER_UI_VERSION = "5.35.0"  # static/vendor/swagger-ui-*: scripts/vendor-swagger-ui
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
STATUS_LABELS = {
    "untested": "untested",
    "queued": "queued",
    "running": "running",
    "promising": "promising",
    "adopted": "adopted",
    "dead_end": "dead end",
    "deferred": "deferred",
    "awaiting": "waiting for your verdict",  # not a status: an approach whose trial ended, verdict not confirmed
}


def _ago(ts: datetime | None) -> str:
    if ts is None:
        return ""
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    secs = int((datetime.now(UTC) - ts).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if secs >= size:
            return f"{secs // size} {unit} ago"
    return "just now"


def _utc(ts: datetime | None) -> str:
    if ts is None:
        return ""
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def make_templates() -> Jinja2Blocks:
    templates = Jinja2Blocks(directory=str(resource_dir("templates")))
    env = templates.env
    env.globals.update(
        app_version=__version__,
        htmx_version=HTMX_VERSION,
        swagger_ui_version=SWAGGER_UI_VERSION,
        plotly_version=plotly.__version__,
        csrf_header=CSRF_HEADER,
        csrf_field=CSRF_FORM_FIELD,
        status_labels=STATUS_LABELS,
        active_trial_states=ACTIVE_TRIAL_STATES,
        terminal_trial_states=TERMINAL_TRIAL_STATES,
        page_feed=feed_attributes,  # <div {{ page_feed(topics, feed_mark) }}>: the page feed's element
    )
    env.filters["ago"] = _ago
    env.filters["utc"] = _utc
    env.filters["status_label"] = lambda s: STATUS_LABELS.get(s, s)
    env.filters["tojson_compact"] = lambda v: json.dumps(v, sort_keys=True)
    return templates
