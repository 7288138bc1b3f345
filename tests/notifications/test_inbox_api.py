"""Issue 45 item 6 through the JSON API and the CLI (SQLite and PostgreSQL): any role watches and reads their
own inbox with their own token; another person's item is not theirs; the page's Watch button and Inbox link."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from app.db import session_scope
from app.domain.scheduling import create_trial
from app.domain.trials import end_trial
from app.models import Approach, Campaign, Role, Runner, TrialState
from app.state import app_state
from tests.support.auth import add_user, api_token, browser_client


def _seed(app) -> int:
    with session_scope(app_state(app).engine) as s:
        c = Campaign(slug="kimi", name="Kimi")
        s.add(c)
        s.flush()
        a = Approach(campaign_id=c.id, key="symm", title="Symm", position=1)  # type: ignore[arg-type]
        s.add_all([a, Runner(name="node-1", token_hash="x")])
        s.flush()
        return a.id or 0


def _end_a_trial(app, approach_id: int) -> int:
    with session_scope(app_state(app).engine) as s:
        runner = s.get_one(Runner, 1)
        trial = create_trial(s, s.get_one(Approach, approach_id), runner, "ada")
        end_trial(s, trial, TrialState.succeeded)
        return trial.id or 0


def test_a_viewer_watches_and_reads_their_own_inbox_by_api(app, client):
    approach_id = _seed(app)
    add_user(app, "vera", Role.viewer)
    add_user(app, "otto", Role.operator)
    vera = {"Authorization": f"Bearer {api_token(app, 'v', 'vera')}"}
    otto = {"Authorization": f"Bearer {api_token(app, 'o', 'otto')}"}
    r = client.post("/api/watches", json={"campaign": "kimi", "approach": "symm"}, headers=vera)
    assert r.status_code == 201, r.text
    assert client.post("/api/watches", json={"campaign": "kimi"}, headers=otto).status_code == 201
    assert client.post("/api/watches", json={"campaign": "nope"}, headers=vera).status_code == 404
    assert client.post("/api/watches", json={"campaign": "kimi", "approach": "x"}, headers=vera).status_code == 404
    assert client.get("/api/watches", headers=vera).json() == [{"campaign": "kimi", "approach": "symm"}]
    trial = _end_a_trial(app, approach_id)
    body = client.get("/api/inbox", headers=vera).json()
    assert body["unread"] == 1 and body["items"][0]["link"] == f"/trials/{trial}"
    mine = body["items"][0]["id"]
    theirs = client.get("/api/inbox", headers=otto).json()["items"][0]["id"]
    assert client.post(f"/api/inbox/{theirs}/read", headers=vera).status_code == 404  # not hers
    assert client.post(f"/api/inbox/{mine}/read", headers=vera).json()["unread"] == 0
    assert client.get("/api/inbox?unread=true", headers=vera).json()["items"] == []
    assert client.get("/api/inbox", headers=otto).json()["unread"] == 1  # his is his
    assert (
        client.post("/api/watches/remove", json={"campaign": "kimi", "approach": "symm"}, headers=vera).status_code
        == 200
    )
    _end_a_trial(app, approach_id)
    assert client.get("/api/inbox", headers=vera).json()["unread"] == 0
    assert client.get("/api/inbox", headers=otto).json()["unread"] == 2
    assert client.get("/api/inbox").status_code == 401  # not logged in


def test_the_pages_watch_button_and_inbox_link(app, client):
    _seed(app)
    add_user(app, "Vera", Role.viewer)
    viewer = browser_client(app, "Vera")
    page = viewer.get("/campaigns/kimi/approaches/symm", headers={"accept": "text/html"}).text
    assert 'hx-post="/campaigns/kimi/approaches/symm/watch"' in page and 'id="inbox-link"' in page
    assert "data-viewer-ok" in page.split('data-testid="watch-form"')[0].rsplit("<form", 1)[1]
    r = viewer.post("/campaigns/kimi/approaches/symm/watch", headers={"HX-Request": "true"})
    assert r.status_code == 200 and "Unwatch this approach" in r.text
    r = viewer.post("/campaigns/kimi/watch", headers={"HX-Request": "true"})
    assert r.status_code == 200 and "Unwatch this campaign" in r.text
    inbox_page = viewer.get("/inbox", headers={"accept": "text/html"}).text
    assert "What you watch" in inbox_page and "/campaigns/kimi/approaches/symm" in inbox_page
    assert viewer.get("/inbox/badge").text.count("Inbox") == 1


def test_cli_watches_and_lists_an_inbox(app, settings):
    approach_id = _seed(app)
    add_user(app, "vera", Role.viewer)
    env = {
        **os.environ,
        "CAMPAIGN_DATABASE_URL": settings.resolved_database_url(),
        "CAMPAIGN_DATA_DIR": str(settings.data_dir),
    }

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "app.cli", "notify", *args], capture_output=True, text=True, env=env, timeout=120
        )

    done = cli("watch", "vera", "kimi")
    assert done.returncode == 0 and "vera watches: kimi" in done.stdout, done.stderr
    trial = _end_a_trial(app, approach_id)
    body = json.loads(cli("inbox", "vera", "--json").stdout)
    assert body["unread"] == 1 and body["items"][0]["link"] == f"/trials/{trial}"
    text = cli("inbox", "vera", "--mark-read").stdout
    assert text.startswith("1 unread") and f"/trials/{trial}" in text
    assert json.loads(cli("inbox", "vera", "--json").stdout)["unread"] == 0
    bad = cli("watch", "nobody", "kimi")
    assert bad.returncode != 0
