"""Issue 45 item 3 through the pages, the API and the CLI (SQLite and PostgreSQL): the navigation's box, ranked
results with the words marked and the log text escaped, a log hit opening its line; login required."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from app.db import session_scope
from app.domain import search
from app.models import Approach, Campaign, LogChunk, Trial
from app.state import app_state

pytestmark = pytest.mark.both_databases  # full-text search: FTS5 on SQLite, tsvector + GIN on PostgreSQL


def _seed(app) -> int:
    with session_scope(app_state(app).engine) as s:
        c = Campaign(slug="kimi", name="Kimi")
        s.add(c)
        s.flush()
        a = Approach(campaign_id=c.id, key="symm", title="Symm", evidence="one-shot halves the latency")  # type: ignore[arg-type]
        s.add(a)
        s.flush()
        t = Trial(campaign_id=c.id, approach_id=a.id, recipe={"kind": "command"})  # type: ignore[arg-type]
        s.add(t)
        s.flush()
        s.add(LogChunk(trial_id=t.id, attempt_id="x", seq=4, offset=0, data="ok\n<script>KeyError: 12</script>\n"))  # type: ignore[arg-type]
        s.flush()
        while search.index_logs(s):
            pass
        return t.id or 0


def test_search_page_escapes_log_text_and_links_to_the_line(app, operator_client):
    trial = _seed(app)
    page = operator_client.get("/campaigns/kimi").text
    assert 'action="/search"' in page  # the navigation's box
    html = operator_client.get("/search", params={"q": "KeyError: 12"}).text
    assert "<script>KeyError" not in html and "&lt;script&gt;<mark>KeyError</mark>: <mark>12</mark>" in html
    assert f'href="/trials/{trial}/log/4?q=KeyError%3A%2012#L2"' in html
    line = operator_client.get(f"/trials/{trial}/log/4", params={"q": "KeyError: 12"}).text
    assert '<span id="L2" class="log-line">&lt;script&gt;<mark>KeyError</mark>' in line
    assert operator_client.get(f"/trials/{trial}/log/99").status_code == 404
    evidence = operator_client.get("/search", params={"q": "halves"}).text
    assert 'href="/campaigns/kimi/approaches/symm#field-evidence"' in evidence and "<mark>halves</mark>" in evidence
    assert "type a word" in operator_client.get("/search", params={"q": "?!"}).text


def test_search_api_and_cli(app, client, api_headers, settings):
    trial = _seed(app)
    r = client.get("/api/search", params={"q": "keyerror"}, headers=api_headers)
    assert r.status_code == 200 and r.json()[0]["link"] == f"/trials/{trial}/log/4#L2"
    assert client.get("/api/search", params={"q": "keyerror"}).status_code == 401  # login required
    assert client.get("/api/search", params={"q": "!!"}, headers=api_headers).status_code == 422
    env = {
        **os.environ,
        "CAMPAIGN_DATABASE_URL": settings.resolved_database_url(),
        "CAMPAIGN_DATA_DIR": str(settings.data_dir),
    }
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "search", "KeyError 12", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["link"] == f"/trials/{trial}/log/4#L2"


def test_a_query_past_the_limit_is_said_on_the_page_not_cut_by_the_box(operator_client):
    page = operator_client.get("/search", params={"q": "x" * 250})
    assert page.status_code == 200 and "a search of at most 200 characters" in page.text
    assert "maxlength" not in page.text
    assert operator_client.get("/search", params={"q": "x" * 5000}).status_code == 422
