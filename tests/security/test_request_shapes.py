"""Inputs are refused with a field error, never ignored, cut or a 500 (issue 32, items 5 and 13): every JSON
body model of the app refuses unknown fields (walked over the route table, so a new one is covered), an
over-long value is refused by the API and the page alike (no `maxlength` cuts it silently in the browser),
and a 4,400-digit version answers 422 on the upgrades page and its API instead of Python's int-digit limit."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import params
from fastapi.routing import APIRoute, iter_route_contexts
from pydantic import BaseModel

from app.state import app_state
from tests.support.paths import ROOT

HUGE_VERSION = "9" * 4400


@pytest.fixture(params=["sqlite"])
def db_url(request, sqlite_template, tmp_path):
    yield sqlite_template.copy(tmp_path)  # shapes are the same on either database


def _json_body_models(app) -> dict[str, type[BaseModel]]:
    found: dict[str, type[BaseModel]] = {}
    for ctx in iter_route_contexts(app.routes):
        route = ctx.route
        if isinstance(route, APIRoute) and route.body_field is not None:
            info = route.body_field.field_info
            model = info.annotation
            if isinstance(info, params.Body) and not isinstance(info, params.Form):
                assert isinstance(model, type) and issubclass(model, BaseModel), (ctx.path, model)
                found[f"{sorted(ctx.methods or ())} {ctx.path}"] = model
    return found


def test_every_json_body_refuses_unknown_fields(app):
    models = _json_body_models(app)
    assert len(models) >= 15, models  # campaigns, approaches, runners, invites, tokens, verdicts, ...
    lax = {where: m.__name__ for where, m in models.items() if m.model_config.get("extra") != "forbid"}
    assert lax == {}, f"these bodies would ignore a misspelt field: {lax}"


def test_a_misspelt_field_is_a_field_error_not_a_default(operator_client):
    r = operator_client.post("/api/invites", json={"role": "viewer", "days": 0})
    assert r.status_code == 422 and r.json()["field"] == "days", r.text
    assert operator_client.get("/api/invites").json() == []  # no 7-day invite was made


def test_a_long_runner_name_is_refused_by_the_api_and_the_page(operator_client):
    name = "n" * 10_000
    r = operator_client.post("/api/runners", json={"name": name})
    assert r.status_code == 422 and r.json()["field"] == "name", r.text
    r = operator_client.post("/runners", data={"name": name}, headers={"HX-Request": "true"})
    assert r.status_code == 422 and "at most 120 characters" in r.text, r.text
    assert '"field": "name"' in r.headers["HX-Trigger"]  # shown by the form's field
    assert operator_client.get("/api/runners").json() == []


def test_no_template_cuts_what_is_typed():
    """`maxlength` makes the browser drop what is past it without a word; the server's bound says it instead."""
    cut = [p.name for p in Path(ROOT, "templates").rglob("*.html") if "maxlength" in p.read_text()]
    assert cut == []


def test_a_huge_version_is_a_field_error_on_the_upgrades_page_and_api(operator_client):
    assert operator_client.post("/api/campaigns", json={"slug": "c", "name": "C"}).status_code == 201
    r = operator_client.get("/api/campaigns/c/upgrades", params={"target": f"torch={HUGE_VERSION}"})
    assert r.status_code == 422 and r.json()["field"] == "target", r.text[:300]
    assert "at most 64 characters" in r.json()["detail"]
    page = operator_client.get("/campaigns/c/upgrades", params={"torch": HUGE_VERSION}, headers={"accept": "text/html"})
    assert page.status_code == 422 and 'id="upgrade-target"' in page.text  # the form again, with its error
    assert 'class="field-error" role="alert"' in page.text and "at most 64 characters" in page.text
    page = operator_client.get(
        "/campaigns/c/upgrades", params={"runner": HUGE_VERSION}, headers={"accept": "text/html"}
    )
    assert page.status_code == 422 and "choose a runner from the list" in page.text
    r = operator_client.get("/api/campaigns/c/upgrades", params={"runner": HUGE_VERSION})
    assert r.status_code == 422 and r.json()["field"] == "runner", r.text[:300]
    # Within the bound, as before.
    assert operator_client.get("/api/campaigns/c/upgrades", params={"target": "torch=2.11.0"}).status_code == 200


def test_an_import_over_the_limit_is_the_forms_error_not_raw_json(app, operator_client):
    limit = app_state(app).settings.max_campaign_file_bytes
    big = {"file": ("big.yaml", b"x" * (limit + 128 * 1024), "application/x-yaml")}
    r = operator_client.post("/campaigns/import", files=big, headers={"HX-Request": "true", "accept": "text/html"})
    assert r.status_code == 413 and r.headers["content-type"].startswith("text/html"), r.text[:200]
    assert '"field": "file"' in r.headers["HX-Trigger"] and "Request body too large" in r.headers["HX-Trigger"]
    assert 'class="flash flash-error"' in r.text and not r.text.startswith("{")
    page = operator_client.post("/campaigns/import", files=big, headers={"accept": "text/html"})
    assert page.status_code == 413 and "<html" in page.text.lower() and "Request body too large" in page.text
    api = operator_client.post("/api/campaigns/import", content=b"x" * (limit + 128 * 1024))
    assert api.status_code == 413 and api.json()["detail"].startswith("Request body too large")
