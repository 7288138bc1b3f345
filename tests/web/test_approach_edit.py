"""Every field of an approach survives an edit through the edit form (issue 21, item 2): the form shows some
requirement fields and merges them onto the rest, and the recipe travels whole as JSON. The field lists come
from the models, so a field added to `Requirements` or `RecipeSpec` is covered without touching this test."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from app.schemas import RecipeSpec, Requirements

# A value other than the default for every field, by its name; a new field fails the first test until it has one.
REQUIREMENTS = {
    "gpus": 2,
    "min_sm": "9.0",
    "software": ["torch", "sglang"],
    "nodes": 2,
    "gpus_per_node": 4,
    "tasks_per_node": 3,
    "sbatch": ["--qos=high", "--constraint=h200"],
}
RECIPE = {
    "kind": "allreduce",
    "params": {"backend": "gloo", "tokens": [1, 8]},
    "env": {"NCCL_ALGO": "Ring", "NCCL_MIN_NCHANNELS": 4},
    "cwd": "/srv/trials",
    "timeout_s": 120.5,
}


def test_the_samples_set_every_field_of_the_models_away_from_its_default():
    assert set(REQUIREMENTS) == set(Requirements.model_fields)
    assert set(RECIPE) == set(RecipeSpec.model_fields)
    for name, field in Requirements.model_fields.items():
        assert REQUIREMENTS[name] != field.get_default(call_default_factory=True), name
    assert Requirements.model_validate(REQUIREMENTS).model_dump() == REQUIREMENTS
    assert RecipeSpec.model_validate(RECIPE).model_dump() == RECIPE


class _EditForm(HTMLParser):
    """What a browser submits from the page's edit form: every named input and textarea, as shown."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = False
        self._textarea: str | None = None
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form" and "edit-form" in (a.get("class") or ""):
            self.inside = True
        elif self.inside and tag == "input" and a.get("name"):
            self.fields[a["name"]] = a.get("value") or ""
        elif self.inside and tag == "textarea" and a.get("name"):
            self._textarea = a["name"]
            self.fields[self._textarea] = ""

    def handle_data(self, data):
        if self._textarea:
            self.fields[self._textarea] += data

    def handle_endtag(self, tag):
        if tag == "textarea":
            self._textarea = None
        elif tag == "form":
            self.inside = False


def _edit_form(client, path: str) -> dict[str, str]:
    parser = _EditForm()
    parser.feed(client.get(path).text)
    assert "title" in parser.fields, "no edit form on the page"
    return parser.fields


@pytest.fixture
def approach(operator_client):
    c = operator_client
    assert c.post("/api/campaigns", json={"slug": "c", "name": "C"}).status_code == 201
    body = {"key": "a", "title": "A", "effort": "1 day", "requirements": REQUIREMENTS, "recipe": RECIPE}
    r = c.post("/api/campaigns/c/approaches", json=body)
    assert r.status_code == 201, r.text
    return c


def test_saving_the_edit_form_unchanged_keeps_every_field(approach):
    before = approach.get("/api/campaigns/c/approaches/a").json()
    form = _edit_form(approach, "/campaigns/c/approaches/a")
    assert approach.post("/campaigns/c/approaches/a", data=form, headers={"HX-Request": "true"}).status_code == 200
    after = approach.get("/api/campaigns/c/approaches/a").json()
    assert after["requirements"] == REQUIREMENTS and after["recipe"] == RECIPE
    assert {k: v for k, v in after.items() if k != "updated_at"} == {
        k: v for k, v in before.items() if k != "updated_at"
    }


def test_a_field_the_form_shows_changes_and_the_ones_it_does_not_show_stay(approach):
    form = _edit_form(approach, "/campaigns/c/approaches/a")
    shown = [n for n in Requirements.model_fields if n in form]
    hidden = [n for n in Requirements.model_fields if n not in form]
    assert shown and hidden  # the form shows some: the merge is what is tested
    form.update(gpus="8", software="torch")
    assert approach.post("/campaigns/c/approaches/a", data=form, headers={"HX-Request": "true"}).status_code == 200
    stored = approach.get("/api/campaigns/c/approaches/a").json()["requirements"]
    assert stored["gpus"] == 8 and stored["software"] == ["torch"]
    assert {n: stored[n] for n in hidden} == {n: REQUIREMENTS[n] for n in hidden}
    # Clearing every shown field keeps the rest (their defaults for the shown ones).
    form.update({n: "" for n in shown})
    assert approach.post("/campaigns/c/approaches/a", data=form, headers={"HX-Request": "true"}).status_code == 200
    stored = approach.get("/api/campaigns/c/approaches/a").json()["requirements"]
    defaults = {n: f.get_default(call_default_factory=True) for n, f in Requirements.model_fields.items()}
    assert {n: stored.get(n, defaults[n]) for n in shown} == {n: defaults[n] for n in shown}
    assert {n: stored[n] for n in hidden} == {n: REQUIREMENTS[n] for n in hidden}


def test_a_bad_value_in_the_edit_form_names_its_field_and_changes_nothing(approach):
    form = _edit_form(approach, "/campaigns/c/approaches/a")
    form["gpus"] = "-1"
    r = approach.post("/campaigns/c/approaches/a", data=form, headers={"HX-Request": "true"})
    assert r.status_code == 422 and '"field": "gpus"' in r.headers["HX-Trigger"]
    form["gpus"], form["recipe"] = "2", '{"kind": "allreduce", "timeout_s": 1e309}'
    r = approach.post("/campaigns/c/approaches/a", data=form, headers={"HX-Request": "true"})
    assert r.status_code == 422 and "timeout_s" in r.text
    assert approach.get("/api/campaigns/c/approaches/a").json()["recipe"] == RECIPE


def test_the_details_name_every_requirement_set_and_the_form_shows_the_declared_inputs(approach):
    html = approach.get("/campaigns/c/approaches/a/details").text
    for name, field in Requirements.model_fields.items():
        value = REQUIREMENTS[name]
        text = ", ".join(value) if isinstance(value, list) else str(value)
        assert f"{field.title} {text}" in html, name
    form = _edit_form(approach, "/campaigns/c/approaches/a")
    assert [n for n in form if n in Requirements.model_fields] == list(Requirements.FORM_FIELDS)
