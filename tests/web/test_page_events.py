"""Page events have one declaration (app/services/events.PAGE_EVENTS): every hx-trigger of every template
names only events the server or its scripts fire, through `hx_trigger`, and no template or script spells
an event's name again (the ranking panel once listened for "sse:campaign" long after the feed fired
"feed:campaign", and never refreshed)."""

from __future__ import annotations

import json
import re

import pytest

from app.errors import form_error_headers
from app.services import events
from app.services.events import HTMX_TRIGGERS, KINDS, PAGE_EVENTS, TOPIC, hx_trigger, notice
from app.templating import make_templates
from app.web.render import CHANGED
from tests.support.paths import ROOT

TEMPLATES = sorted((ROOT / "templates").rglob("*.html"))
SCRIPTS = sorted(p for p in (ROOT / "static").glob("*.js"))  # the board's own, not static/vendor/
ATTRIBUTE = re.compile(r'hx-trigger="([^"]*)"')
FIRED = {ev.name for ev in PAGE_EVENTS.values()}


def _spec_events(spec: str) -> list[tuple[str, str]]:
    """(event name, its modifiers) of each comma-separated trigger of an hx-trigger value."""
    out = []
    for part in spec.split(","):
        name, _, rest = part.strip().partition(" ")
        out.append((name.split("[", 1)[0], rest))
    return out


def _triggers() -> list[tuple[str, str, str]]:
    """(template, the attribute as written, the attribute rendered) of every hx-trigger in templates/."""
    env = make_templates().env
    found = []
    for path in TEMPLATES:
        source = re.sub(r"\{#.*?#\}", "", path.read_text(encoding="utf-8"), flags=re.S)  # not the comments
        for written in ATTRIBUTE.findall(source):
            found.append((str(path.relative_to(ROOT)), written, env.from_string(written).render()))
    return found


def test_every_hx_trigger_names_only_events_the_server_or_its_scripts_fire():
    triggers = _triggers()
    assert len(triggers) >= 20, triggers  # the parse found the templates' triggers
    following = 0
    for template, written, rendered in triggers:
        names = _spec_events(rendered)
        for name, modifiers in names:
            assert name in FIRED | HTMX_TRIGGERS, f"{template}: {written!r} listens for {name!r}, which nothing fires"
            on_body = [ev for ev in PAGE_EVENTS.values() if ev.name == name and ev.on_body]
            assert bool(on_body) == ("from:body" in modifiers), f"{template}: {name} is fired on <body>: from:body"
        for ev in PAGE_EVENTS.values():
            assert ev.name not in written, f"{template}: {written!r} spells {ev.name!r}: use hx_trigger(...)"
        feed = {n for n, _ in names if n in {PAGE_EVENTS[k].name for k in KINDS}}
        if feed:
            following += 1
            assert PAGE_EVENTS[events.STALE].name in {n for n, _ in names}, f"{template}: {written!r}"
    assert following >= 15  # the live panels: each follows some page feed event


def test_each_declared_event_is_fired_by_what_the_declaration_says():
    """A feed event's kind is a topic the feed accepts and its notices name it; every other event is
    fired, by its key, from the file its declaration names."""
    for kind in KINDS:
        topic = kind if TOPIC.fullmatch(kind) else f"{kind}:1"
        assert TOPIC.fullmatch(topic), kind
        assert json.loads(notice("b.1", topic))["event"] == PAGE_EVENTS[kind].name
    assert CHANGED["HX-Trigger"] == PAGE_EVENTS["campaign_changed"].name
    assert PAGE_EVENTS["form_error"].name in json.loads(form_error_headers("no")["HX-Trigger"])
    for key, ev in PAGE_EVENTS.items():
        if key in KINDS:
            continue
        path = ROOT / ev.fired_by.split()[0].rstrip(",")
        text = path.read_text(encoding="utf-8")
        by_key = f".{key}" in text or f'PAGE_EVENTS["{key}"]' in text or (key == events.STALE and "STALE" in text)
        assert by_key, f"{path} does not fire {key}"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_take_event_names_from_the_server(script):
    text = script.read_text(encoding="utf-8")
    for ev in PAGE_EVENTS.values():
        assert f'"{ev.name}"' not in text and f"'{ev.name}'" not in text, f"{script.name} spells {ev.name}"


def test_hx_trigger_writes_from_body_adds_stale_and_refuses_unknown_names():
    assert hx_trigger("load", "campaign_changed", "campaign", "runners") == (
        "load, campaign-changed from:body, feed:campaign, feed:runners, feed-stale"
    )
    assert hx_trigger("trial_ended", "metrics_arrived") == "trial-ended from:body, metrics-arrived from:body"
    with pytest.raises(KeyError):
        hx_trigger("sse:campaign")
