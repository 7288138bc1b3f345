"""HTML pages and htmx fragments: user text is escaped, errors come back as a flash."""

import gzip
import json

import pytest

from app.db import session_scope
from app.domain import campaign_files, campaigns
from app.domain.campaign_files import export_campaign
from app.state import app_state


@pytest.fixture
def pages(operator_client):
    c = operator_client
    assert c.post("/api/campaigns", json={"slug": "c", "name": "C <b>bold</b>"}).status_code == 201
    assert (
        c.post("/api/campaigns/c/approaches", json={"key": "a", "title": "<script>alert(1)</script>"}).status_code
        == 201
    )
    return c


def test_user_text_is_escaped(pages):
    html = pages.get("/campaigns/c").text
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "C &lt;b&gt;bold&lt;/b&gt;" in html


def test_htmx_status_change_returns_the_fragment_and_an_event(pages):
    r = pages.post(
        "/campaigns/c/approaches/a/status",
        data={"status": "dead_end", "reason": "OOM at 8 channels"},
        headers={"HX-Request": "true"},
    )
    assert r.status_code == 200 and r.headers["HX-Trigger"] == "campaign-changed"
    assert 'id="verdict"' in r.text and "OOM at 8 channels" in r.text and "<html" not in r.text
    page = pages.get("/campaigns/c/approaches/a").text
    assert "OOM at 8 channels" in page and "badge-dead_end" in page


def test_htmx_error_is_a_flash_retargeted(pages):
    r = pages.post(
        "/campaigns/c/approaches/a/status", data={"status": "deferred", "reason": ""}, headers={"HX-Request": "true"}
    )
    assert r.status_code == 422 and r.headers["HX-Retarget"] == "#flash"
    assert "needs a reason" in r.text
    # The same message, with the field, as an event static/app.js shows next to that field.
    event = json.loads(r.headers["HX-Trigger"])["form-error"]
    assert event["field"] == "reason" and "needs a reason" in event["message"]


def test_forms_that_change_page_navigate_htmx_and_redirect_plain_posts(pages):
    htmx = {"HX-Request": "true"}
    r = pages.post("/campaigns", data={"slug": "n1", "name": "N1"}, headers=htmx, follow_redirects=False)
    assert r.status_code == 200 and r.headers["HX-Redirect"] == "/campaigns/n1" and not r.text
    r = pages.post("/campaigns", data={"slug": "n2", "name": "N2"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/campaigns/n2"
    r = pages.post("/campaigns", data={"slug": "n1", "name": "again"}, headers=htmx)
    assert r.status_code == 409 and json.loads(r.headers["HX-Trigger"])["form-error"]["field"] == "slug"
    r = pages.post("/campaigns/c/approaches/a/delete", headers=htmx, follow_redirects=False)
    assert r.status_code == 200 and r.headers["HX-Redirect"] == "/campaigns/c" and not r.text


def test_add_reorder_and_edit_through_forms(pages):
    r = pages.post(
        "/campaigns/c/approaches", data={"key": "b", "title": "B", "effort": "low"}, headers={"HX-Request": "true"}
    )
    assert r.status_code == 200 and 'id="approach-b"' in r.text
    r = pages.post("/campaigns/c/approaches/b/move", data={"direction": "up"}, headers={"HX-Request": "true"})
    assert r.text.index('id="approach-b"') < r.text.index('id="approach-a"')
    r = pages.post(
        "/campaigns/c/approaches/b",
        data={
            "title": "B2",
            "recipe": '{"kind": "command", "params": {"argv": ["true"]}}',
            "gpus": "2",
            "min_sm": "9.0",
            "software": "torch, sglang",
        },
        headers={"HX-Request": "true"},
    )
    assert r.status_code == 200, r.text
    b = pages.get("/api/campaigns/c/approaches/b").json()
    assert b["title"] == "B2" and b["requirements"] == {"gpus": 2, "min_sm": "9.0", "software": ["torch", "sglang"]}
    r = pages.post(
        "/campaigns/c/approaches/b", data={"title": "B3", "recipe": "{not json"}, headers={"HX-Request": "true"}
    )
    assert r.status_code == 422 and "recipe" in r.text
    assert pages.get("/api/campaigns/c/approaches/b").json()["title"] == "B2"


def test_export_download_and_import_upload(pages):
    r = pages.get("/campaigns/c/export.yaml")
    assert r.headers["content-disposition"] == 'attachment; filename="c.yaml"'
    text = r.text.replace("slug: c", "slug: c-copy")
    r = pages.post("/campaigns/import", files={"file": ("c.yaml", text, "application/x-yaml")}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/campaigns/c-copy"
    assert len(pages.get("/api/campaigns/c-copy/approaches").json()) == 1
    # gzip-compressed YAML (a results campaign past the limit as YAML) imports the same way
    packed = gzip.compress(text.replace("slug: c-copy", "slug: c-gz").encode())
    r = pages.post(
        "/campaigns/import", files={"file": ("c.yaml.gz", packed, "application/gzip")}, follow_redirects=False
    )
    assert r.status_code == 303 and r.headers["location"] == "/campaigns/c-gz"
    bomb = {"file": ("b.yaml.gz", gzip.compress(b"#" * (65 << 20)), "application/gzip")}
    r = pages.post("/campaigns/import", files=bomb, headers={"HX-Request": "true"})
    assert r.status_code == 422 and "expands past" in r.text


def test_both_export_routes_stream_the_campaign_file(pages, app, monkeypatch):
    """The page's download and the API send the text `export_campaign` writes, read in batches; an unknown
    campaign is a 404 before the stream starts."""
    monkeypatch.setattr(campaign_files, "EXPORT_BATCH", 2)
    for key in ("b", "c", "d", "e"):
        assert pages.post("/api/campaigns/c/approaches", json={"key": key, "title": f"{key}: yes"}).status_code == 201
    r = pages.post("/api/campaigns/c/approaches/d/status", json={"status": "deferred", "reason": "needs\na build"})
    assert r.status_code == 200
    with session_scope(app_state(app).engine, write=False) as s:
        expected = export_campaign(s, campaigns.get_campaign(s, "c"))
    assert "- key: e" in expected and "reason: |-" in expected
    for path in ("/campaigns/c/export.yaml", "/api/campaigns/c/export"):
        r = pages.get(path)
        assert r.status_code == 200 and r.headers["content-type"] == "application/x-yaml"
        assert r.text == expected
    assert pages.get("/api/campaigns/nope/export").status_code == 404
    r = pages.get("/campaigns/nope/export.yaml")
    assert r.status_code == 404 and "content-disposition" not in r.headers
