"""Jinja2 templates (full pages or one block for htmx), the pinned front-end assets and their versioned URLs."""

from __future__ import annotations

import hashlib
import json
import re
import types
import typing
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum

from jinja2_fragments.fastapi import Jinja2Blocks
from markupsafe import Markup, escape
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from app import __version__
from app.config import resource_dir
from app.domain.logs import dropped_marker_json
from app.domain.search import MARK_END, MARK_START
from app.domain.units import plural
from app.models import ACTIVE_TRIAL_STATES, TERMINAL_TRIAL_STATES, aware
from app.protocol.messages import close_codes_json
from app.protocol.metrics import METRIC_PREFIX, PHASE_PREFIX
from app.schemas import RunnerPublic, TrialPublic
from app.security import CSRF_FORM_FIELD, CSRF_HEADER
from app.services.page_events import feed_attributes, hx_trigger, inbox, page_events_json

HTMX_VERSION = "2.0.11"
SWAGGER_UI_VERSION = "5.35.0"  # static/vendor/swagger-ui-*: scripts/vendor-swagger-ui
# static/vendor/plotly-cartesian-*: scripts/vendor-plotly-cartesian (scatter, bar, heatmap: every chart's trace
# type), the plotly.js version the installed plotly package bundles (tests/web/test_assets.py).
PLOTLY_JS_VERSION = "4.1.1"
PLOTLY_JS_ASSET = f"vendor/plotly-cartesian-{PLOTLY_JS_VERSION}.min.js"
PLOTLY_JS = resource_dir("static") / PLOTLY_JS_ASSET
# Versioned asset URLs: /static/v/<content hash>/<path>, cached for a year and never revalidated
# (app.main mounts them); a changed file gets a new URL. Plain /static/<path> stays, revalidated.
ASSET_PREFIX = "/static/v"
IMMUTABLE = "public, max-age=31536000, immutable"
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


def _css_status_colours() -> dict[str, str]:
    """The status colours, defined once as `--status-<name>: #rrggbb` custom properties in static/app.css
    (the badges use them); the charts read them from here so a status looks the same on both."""
    css = (resource_dir("static") / "app.css").read_text()
    return dict(re.findall(r"--status-([a-z_]+):\s*(#[0-9a-fA-F]{6})\b", css))


STATUS_COLORS = _css_status_colours()


_hashes: dict[tuple[str, int, int], str] = {}


def asset_hash(path: str) -> str:
    """The first 12 hex digits of the SHA-256 of static/<path>, kept per (path, mtime, size): an edited
    file gets a new hash without a restart. A missing file raises FileNotFoundError (a typo fails a test)."""
    root = resource_dir("static").resolve()
    file = (root / path).resolve()
    if not file.is_relative_to(root):
        raise FileNotFoundError(path)  # ../ out of static/: never read, never served
    stat = file.stat()
    key = (path, stat.st_mtime_ns, stat.st_size)
    if key not in _hashes:
        _hashes[key] = hashlib.sha256(file.read_bytes()).hexdigest()[:12]
    return _hashes[key]


def inline_css(path: str) -> Markup:
    """The text of the stylesheet static/<path>, for a page that may load none (the status page: its CSP allows
    inline styles only, and its export opens offline)."""
    root = resource_dir("static").resolve()
    file = (root / path).resolve()
    if not file.is_relative_to(root) or file.suffix != ".css":
        raise FileNotFoundError(path)
    return Markup(file.read_text(encoding="utf-8"))


def asset_url(path: str) -> str:
    """The versioned URL of static/<path>, e.g. asset_url("app.css") == "/static/v/3f2a.../app.css"."""
    return f"{ASSET_PREFIX}/{asset_hash(path)}/{path}"


class VersionedStatic(StaticFiles):
    """Serves /static/v/<hash>/<path> (asset_url's URLs) as immutable for a year; a hash that is not the
    file's current one is 404, so an old URL never caches new content under its name."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        digest, _, rest = path.partition("/")
        try:
            current = asset_hash(rest)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, ValueError) as exc:
            raise HTTPException(404) from exc
        if not rest or digest != current:
            raise HTTPException(404)
        response = await super().get_response(rest, scope)
        response.headers["cache-control"] = IMMUTABLE
        return response


class RevalidatedStatic(StaticFiles):
    """Serves plain /static/<path>: the browser revalidates each time (ETag / Last-Modified: a 304 when
    unchanged), so an unversioned URL never shows a stale file."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.setdefault("cache-control", "no-cache")
        return response


def _ago(ts: datetime | None) -> str:
    ts = aware(ts)
    if ts is None:
        return ""
    secs = int((datetime.now(UTC) - ts).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if secs >= size:
            return f"{secs // size} {unit} ago"
    return "just now"


def _utc(ts: datetime | None) -> str:
    ts = aware(ts)
    return ts.strftime("%Y-%m-%d %H:%M UTC") if ts is not None else ""


@dataclass(frozen=True)
class ShownField:
    """A declared field as a table or form shows it (templates/_fields.html): its heading is the field's title, its
    kind says how a value is written ("time", "state", "list" or "text")."""

    name: str
    title: str
    kind: str


def _kind(annotation: typing.Any) -> str:
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    kinds = [t for t in (typing.get_args(annotation) if union else (annotation,)) if t is not type(None)]
    first = typing.get_origin(kinds[0]) or kinds[0] if kinds else str
    if first is datetime:
        return "time"
    if first is list:
        return "list"
    return "state" if isinstance(first, type) and issubclass(first, Enum) else "text"


def shown_fields(model: type[BaseModel]) -> dict[str, ShownField]:
    """A model's fields by name, as templates/_fields.html writes them (a title-less field: its name in words)."""
    return {
        name: ShownField(name, info.title or name.replace("_", " ").capitalize(), _kind(info.annotation))
        for name, info in model.model_fields.items()
    }


def make_templates() -> Jinja2Blocks:
    templates = Jinja2Blocks(directory=str(resource_dir("templates")))
    env = templates.env
    env.globals.update(
        app_version=__version__,
        htmx_version=HTMX_VERSION,
        swagger_ui_version=SWAGGER_UI_VERSION,
        plotly_asset=PLOTLY_JS_ASSET,
        status_colors=STATUS_COLORS,
        asset=asset_url,
        inline_css=inline_css,  # <style>{{ inline_css("tables.css") }}</style> (status.html)
        csrf_header=CSRF_HEADER,
        csrf_field=CSRF_FORM_FIELD,
        status_labels=STATUS_LABELS,
        active_trial_states=ACTIVE_TRIAL_STATES,
        terminal_trial_states=TERMINAL_TRIAL_STATES,
        page_feed=feed_attributes,  # <div {{ page_feed(topics, feed_mark) }}>: the page feed's element
        inbox_topic=inbox,  # the navigation's inbox feed (base.html)
        hx_trigger=hx_trigger,  # hx-trigger="{{ hx_trigger('campaign_changed', 'campaign') }}" (events.PAGE_EVENTS)
        page_events=page_events_json(),  # <body data-page-events>: the event names static/*.js fire and hear
        # What static/livelog.js must know of the server's formats, read from the trial page.
        close_codes=close_codes_json(),
        metric_prefix=METRIC_PREFIX,
        phase_prefix=PHASE_PREFIX,
        dropped_marker=dropped_marker_json(),
        # The declared fields the trial and runner tables loop over ({{ cell(fields.trial.phase, trial.phase) }}).
        fields={"trial": shown_fields(TrialPublic), "runner": shown_fields(RunnerPublic)},
    )
    env.filters["ago"] = _ago
    env.filters["highlight"] = highlight  # a search snippet: escaped, then its matched words in <mark>
    env.filters["whole_tokens"] = whole_tokens  # prose naming flags and paths: each such word on one line
    env.filters["plural"] = plural  # {{ n | plural("trial") }}: "1 trial", "2 trials"
    env.filters["utc"] = _utc
    env.filters["status_label"] = lambda s: STATUS_LABELS.get(s, s)
    env.filters["tojson_compact"] = lambda v: json.dumps(v, sort_keys=True)
    env.globals["status_badge"] = env.get_template("_partials/status_badge.html").module.status_badge  # type: ignore[attr-defined]
    return templates


# A word a browser may break inside at a line's end: one holding a hyphen or a slash (a flag, a path, a range).
_BREAKABLE_WORD = re.compile(r"\S*[-/]\S*")


def whole_tokens(text: object) -> Markup:
    """Prose that names flags, paths and ranges (an engine setting's source, a note) as HTML: escaped, then each
    word holding a hyphen or a slash in <span class="token">, which static/tables.css keeps on one line; else
    `--speculative-num-draft-tokens` may break after any of its hyphens (issue 43 item 9)."""
    safe = str(escape(text))  # escaped: no "<" or ">" left for a word to cut through
    return Markup(_BREAKABLE_WORD.sub(lambda m: f'<span class="token">{m.group(0)}</span>', safe))


def highlight(snippet: str) -> Markup:
    """A search snippet as HTML: every character escaped (log text stays text), then the database's marks
    around the matched words (app/domain/search.py MARK_START / MARK_END) become <mark>."""
    safe = str(escape(snippet))
    return Markup(safe.replace(MARK_START, "<mark>").replace(MARK_END, "</mark>"))
