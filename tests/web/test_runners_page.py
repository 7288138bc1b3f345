"""The runners page: an operator creates a runner token (shown once), and revokes it."""

import json
import re

import pytest

from app.state import app_state


@pytest.fixture(params=["sqlite"])
def db_url(request, tmp_path):
    yield f"sqlite:///{tmp_path / 'runners.db'}"


def test_create_shows_the_token_once_and_revoke_refuses_it(operator_client, app):
    from app.db import session_scope
    from app.domain.runners import authenticate

    r = operator_client.post("/runners", data={"name": "gpu-node-1"}, headers={"HX-Request": "true"})
    assert r.status_code == 200
    shown = re.search(r'<pre class="token">([^<]+)</pre>', r.text)
    assert shown, r.text
    token = shown.group(1)
    assert "CAMPAIGN_RUNNER_TOKEN=&lt;token&gt; campaign runner --server http://127.0.0.1" in r.text
    page = operator_client.get("/runners").text
    assert "gpu-node-1" in page and token not in page  # shown once, only its hash is kept
    with session_scope(app_state(app).engine, write=False) as s:
        runner = authenticate(s, token)
        assert runner is not None and runner.name == "gpu-node-1"
    r = operator_client.post(f"/runners/{runner.id}/revoke", headers={"HX-Request": "true"})
    assert r.status_code == 200
    with session_scope(app_state(app).engine, write=False) as s:
        assert authenticate(s, token) is None


def test_a_duplicate_name_is_a_clear_error(operator_client):
    assert operator_client.post("/runners", data={"name": "n"}, headers={"HX-Request": "true"}).status_code == 200
    r = operator_client.post("/runners", data={"name": "n"}, headers={"HX-Request": "true"})
    assert r.status_code == 409 and "named &#39;n&#39; exists already" in r.text, r.text[:300]
    assert json.loads(r.headers["HX-Trigger"])["form-error"]["field"] == "name"  # shown by the field
