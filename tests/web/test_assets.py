"""Static assets: every page refers to them by versioned URL (/static/v/<content hash>/<path>), served as
immutable for a year; plain /static URLs are revalidated; the charts page loads the cartesian plotly.js
bundle (the plotly.js version the plotly package's schema describes) and not much else; a favicon is
linked from every page and /favicon.ico answers."""

from __future__ import annotations

import hashlib
import re

import plotly
import pytest

from app.config import resource_dir
from app.state import app_state
from app.templating import (
    IMMUTABLE,
    PLOTLY_JS,
    PLOTLY_JS_ASSET,
    PLOTLY_JS_VERSION,
    asset_hash,
    asset_url,
    inline_css,
)
from tests.support.charts import build_fixture_campaign

STATIC = resource_dir("static")
ASSET = re.compile(r'<(?:script|link)\b[^>]*?\b(?:src|href)="([^"]+)"')
# What the charts page may load in all (scripts and styles): the cartesian bundle is 1.5 MB, the full
# plotly.min.js 4.8 MB (issue 22).
CHARTS_PAGE_BUDGET = 1_800_000


@pytest.fixture
def pages(app, operator_client):
    """A path of every page kind that carries assets."""
    from app.db import session_scope
    from app.domain import campaigns

    with session_scope(app_state(app).engine) as session:
        campaign = build_fixture_campaign(session)
        approach = campaigns.approaches(session, campaign)[0]
        slug, key = campaign.slug, approach.key
    link = operator_client.post(f"/api/campaigns/{slug}/share-links", json={"name": "assets"})
    assert link.status_code in (200, 201), link.text
    return [
        "/",
        f"/campaigns/{slug}",
        f"/campaigns/{slug}/approaches/{key}",
        f"/campaigns/{slug}/charts",
        "/runners",
        "/users",
        "/docs",
        "/" + link.json()["url"].split("://", 1)[1].split("/", 1)[1],  # the share page
    ]


def test_every_page_links_versioned_assets_and_a_favicon(operator_client, pages):
    for path in pages:
        r = operator_client.get(path)
        assert r.status_code == 200, (path, r.status_code)
        urls = ASSET.findall(r.text)
        local = [u for u in urls if u.startswith("/")]
        assert local and all(u.startswith("/static/v/") for u in local), (path, local)
        assert asset_url("favicon.svg") in urls, path
        for url in local:
            digest, name = url.removeprefix("/static/v/").split("/", 1)
            assert digest == hashlib.sha256((STATIC / name).read_bytes()).hexdigest()[:12], url


def test_versioned_assets_are_immutable_and_a_stale_hash_is_not_found(client):
    url = asset_url("app.css")
    r = client.get(url)
    assert r.status_code == 200 and r.headers["cache-control"] == IMMUTABLE == "public, max-age=31536000, immutable"
    assert r.content == (STATIC / "app.css").read_bytes() and r.headers["content-type"].startswith("text/css")
    stale = url.replace(url.split("/")[3], "0" * 12)
    assert client.get(stale).status_code == 404  # never caches other content under an old name
    assert client.get("/static/v/" + url.split("/")[3] + "/no-such-file.js").status_code == 404
    assert client.get("/static/v/" + url.split("/")[3] + "/../main.py").status_code == 404


def test_no_versioned_url_reaches_outside_static():
    assert (STATIC.parent / "app" / "main.py").exists()
    with pytest.raises(FileNotFoundError):
        asset_hash("../app/main.py")  # so VersionedStatic answers 404 before reading it


def test_the_status_page_inlines_the_shared_table_styles_and_nothing_outside_static():
    """The status page may load no stylesheet (CSP: inline styles only): it carries static/tables.css itself."""
    assert inline_css("tables.css") == (STATIC / "tables.css").read_text()
    for path in ("../app/main.py", "app.js", "../pyproject.toml"):
        with pytest.raises(FileNotFoundError):
            inline_css(path)


def test_plain_static_urls_are_revalidated(client):
    r = client.get("/static/app.js")
    assert r.status_code == 200 and r.headers["cache-control"] == "no-cache" and r.headers["etag"]
    again = client.get("/static/app.js", headers={"If-None-Match": r.headers["etag"]})
    assert again.status_code == 304


def test_favicon(client):
    r = client.get("/favicon.ico")
    assert r.status_code == 200 and r.headers["content-type"] == "image/svg+xml"
    assert r.content.startswith(b"<svg") and r.content == (STATIC / "favicon.svg").read_bytes()


def test_the_charts_page_loads_the_cartesian_bundle_within_budget(operator_client, pages):
    html = operator_client.get(next(p for p in pages if p.endswith("/charts"))).text
    urls = [u for u in ASSET.findall(html) if u.startswith("/")]
    assert asset_url(PLOTLY_JS_ASSET) in urls and not any("plotly.min.js" in u for u in urls)
    total = 0
    for url in urls:
        r = operator_client.get(url)
        assert r.status_code == 200 and r.headers["cache-control"] == IMMUTABLE, url
        total += len(r.content)
    assert total <= CHARTS_PAGE_BUDGET, total


def test_the_bundle_is_the_pinned_cartesian_build_and_draws_scatter_bar_and_heatmap():
    text = PLOTLY_JS.read_text(encoding="utf-8")
    assert text.startswith(f"/**\n* plotly.js (cartesian - minified) v{PLOTLY_JS_VERSION}\n")
    # The figures are validated with the plotly package's schema (test_chart_schema.py): the same plotly.js.
    assert plotly.offline.get_plotlyjs_version() == PLOTLY_JS_VERSION
    traces = set(re.findall(r'moduleType:"trace",name:"([a-z0-9]+)"', text))
    assert {"scatter", "bar", "heatmap"} <= traces, traces
    assert f"VERSION={PLOTLY_JS_VERSION}\n" in (STATIC.parent / "scripts" / "vendor-plotly-cartesian").read_text()
    assert (STATIC / f"vendor/plotly-cartesian-{PLOTLY_JS_VERSION}.LICENSE").read_text().startswith("MIT License")
