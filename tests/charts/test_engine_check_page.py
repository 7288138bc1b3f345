"""The engine check (issue 42 item 3) where people read it: the charts page, the share page, the JSON API and
`campaign answer-check`, over the hand-computable campaign of tests/support/engine_check.py (SQLite and
PostgreSQL). A missed prediction is shown; a campaign without an engine trial says what is missing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from app.db import session_scope
from app.state import app_state
from tests.support.engine_check import SLUG, EngineCheckBuilder, build_engine_check_campaign


@pytest.fixture
def checked(app):
    with session_scope(app_state(app).engine) as session:
        b = build_engine_check_campaign(session)
        # a tag that would be markup if the page did not escape it, and a model path (only its name is shown)
        b.engine_trial({(8, 3): (2.0, 12.0, 20.0, [1.1, 1.2, 1.3])}, model="tiny<img src=x onerror=alert(1)>")
        b.engine_trial({(8, 1): (1.5, 12.0, 14.0, [1.2, 1.25, 1.3])}, model="/models/SECRET-PATH/tiny-llama-b")
    return app


def _rows(html: str, cell: str) -> dict[str, str]:
    """prediction name -> its held/missed/open mark, for one cell's rows."""
    return dict(re.findall(rf'data-cell="{cell}" data-prediction="([^"]+)" data-held="(\w+)"', html))


def test_the_charts_page_shows_held_and_missed_predictions(operator_client, checked):
    r = operator_client.get(f"/campaigns/{SLUG}/charts")
    assert r.status_code == 200, r.text
    section = r.text[r.text.index('id="engine-check"') :]
    assert _rows(section.replace("&#39;", "'"), "4,3") == {
        "engine's counting": "held",
        "stand-in compute": "missed",
        "stand-in + engine overhead": "missed",
    }
    assert "held (off by +0.8%)" in section and "missed by -46.2%" in section and "missed by +15.2%" in section
    assert '1.550 <span class="muted">[1.500, 1.600]</span>' in section
    assert "one trial (#" in section and "within-trial spread" in section
    # where the stand-in misses, the page names the gap it measured: the engine's per-step overhead
    assert "The gap measured: the engine's per-step overhead 8.000" in section
    assert "data-overheads" in section and "batch 4: 8.000 ms" in section
    assert "<img src=x" not in r.text and "tiny&lt;img src=x onerror=alert(1)&gt;" in section


def test_a_campaign_without_an_engine_trial_says_what_is_missing(operator_client, app):
    with session_scope(app_state(app).engine) as session:
        EngineCheckBuilder(session).standin_trial()
    r = operator_client.get(f"/campaigns/{SLUG}/charts")
    assert r.status_code == 200
    assert re.search(r"data-engine-check-missing>Not checked yet: no vllm_server trial", r.text)


def test_the_api_gives_the_check_to_an_api_token_and_refuses_without_one(client, api_headers, checked):
    assert client.get(f"/api/campaigns/{SLUG}/answer/engine-check").status_code == 401
    r = client.get(f"/api/campaigns/{SLUG}/answer/engine-check", headers=api_headers)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["missed"] >= 2 and body["missing"] == []
    (cell,) = [c for c in body["cells"] if (c["batch"], c["draft_tokens"]) == (4, 3)]
    assert cell["one_trial"] and cell["measured"]["value"] == pytest.approx(1.55)
    words = {p["name"]: p["words"] for p in cell["predictions"]}
    assert words == {
        "engine's counting": "held (off by +0.8%)",
        "stand-in compute": "missed by -46.2%",
        "stand-in + engine overhead": "missed by +15.2%",
    }
    assert cell["inputs"]["engine_overhead_ms"]["value"] == pytest.approx(8.0)
    # batch 8 was measured by the engine only (no stand-in decode there): no overhead is claimed for it
    assert [(o["batch"], o["value"]) for o in body["overheads"]] == [(4, pytest.approx(8.0))]
    assert client.get("/api/campaigns/nope/answer/engine-check", headers=api_headers).status_code == 404


def test_the_share_page_shows_the_check_read_only(operator_client, checked):
    r = operator_client.post(f"/campaigns/{SLUG}/share-links", data={"name": "review"}, headers={"HX-Request": "true"})
    assert r.status_code == 200, r.text
    url = re.search(r'class="share-url" readonly value="http://127.0.0.1([^"]+)"', r.text)
    assert url
    with TestClient(checked, base_url="http://127.0.0.1") as anonymous:
        page = anonymous.get(url.group(1))
    assert page.status_code == 200
    section = page.text[page.text.index('id="engine-check"') :]
    assert "missed by -46.2%" in section and "held (off by +0.8%)" in section
    # a model path names where the weights lie: only its last part is shown
    assert "SECRET-PATH" not in page.text and "tiny-llama-b" in section


def test_cli_answer_check(checked, settings):
    env = {
        **os.environ,
        "CAMPAIGN_DATABASE_URL": settings.resolved_database_url(),
        "CAMPAIGN_DATA_DIR": str(settings.data_dir),
    }

    def cli(*args: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "app.cli", "answer-check", *args]
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)

    text = cli(SLUG)
    assert text.returncode == 0, text.stderr
    assert "batch 4, k 3 (vllm 0.32.0, tiny-llama, ngram" in text.stdout
    assert "  stand-in compute: 0.833: missed by -46.2%" in text.stdout
    assert "  engine's counting: 1.562: held (off by +0.8%)" in text.stdout
    body = json.loads(cli(SLUG, "--json").stdout)
    assert {c["draft_tokens"] for c in body["cells"]} >= {1, 3}
    missing = cli("nope")
    assert missing.returncode != 0 and "nope" in (missing.stderr + missing.stdout)
