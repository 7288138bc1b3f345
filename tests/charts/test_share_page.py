"""Share links and the stakeholder status page: read-only, no secrets, revocable, exportable."""

from __future__ import annotations

import html as html_module
import re

import pytest
from fastapi.testclient import TestClient
from sqlmodel import select

from app.db import session_scope
from app.domain import campaigns
from app.domain.logins import create_api_token
from app.domain.runners import create_runner
from app.models import Replay, Runner
from app.state import app_state
from app.templating import PLOTLY_JS, PLOTLY_JS_ASSET, asset_url
from tests.support.charts import SECRETS, SLUG


def html_text(fragment: str) -> str:
    return html_module.unescape(re.sub(r"<[^>]+>", "", fragment))


@pytest.fixture
def operator(fixture_app, operator_client):
    return operator_client


@pytest.fixture
def anonymous(fixture_app):
    with TestClient(fixture_app, base_url="http://127.0.0.1") as c:
        yield c


def _create_link(operator, name="weekly review") -> tuple[str, int]:
    r = operator.post(f"/campaigns/{SLUG}/share-links", data={"name": name}, headers={"HX-Request": "true"})
    assert r.status_code == 200, r.text
    row = re.search(r'<tr id="share-link-(\d+)"[^>]*class="live created"', r.text)
    assert row, r.text
    shown = re.search(r'class="share-url" readonly value="([^"]+)"', r.text[r.text.index(row.group(0)) :])
    assert shown, r.text
    url = shown.group(1)
    assert url.startswith("http://127.0.0.1/s/")
    return url.removeprefix("http://127.0.0.1"), int(row.group(1))


def test_status_page_answers_the_stakeholder_questions(operator, anonymous):
    path, _ = _create_link(operator)
    r = anonymous.get(path)
    assert r.status_code == 200
    html = r.text
    assert "FIXTURE: EAGLE-3 break-even" in html
    # Profitable now, with which approach; the best result vs the baseline; what runs next.
    assert re.search(r'id="profitable">.*?Yes, with torch symm-mem two-shot', html, re.S)
    assert re.search(
        r'id="best">.*?117.6 tok/s.*?FlashInfer PCIe-IPC allreduce.*?\+43%.*?82 tok/s baseline', html, re.S
    )
    assert re.search(r'id="next">.*?Expert parallelism', html, re.S)
    # Verdict counts and dead ends with reasons and the stack they were reached on.
    assert re.search(r'data-status="dead_end">.*?<b>3</b>', html)
    dead = html[html.index('id="dead-ends"') :]
    assert "FlashInfer JIT has no SM120 target" in dead and "torch 2.10.0+cu128 / CUDA 12.8 / SM 12.0" in dead
    assert "holds for FlashInfer unknown on SM 12.0" in dead
    # The break-even chart and chart 3, drawn with the locally served plotly.js.
    assert 'id="figure-break-even"' in html and 'id="figure-throughput"' in html
    assert f'<script src="{asset_url(PLOTLY_JS_ASSET)}">' in html and "cdn" not in html.lower()
    assert (
        r.headers["referrer-policy"] == "no-referrer" and "form-action 'none'" in r.headers["content-security-policy"]
    )


def test_status_page_shows_no_secrets_and_no_forms(fixture_app, operator, anonymous):
    with session_scope(app_state(fixture_app).engine) as session:
        _runner, runner_token = create_runner(session, f"runner-{SECRETS['hostname']}")
        api = create_api_token(session, "ci")
    path, _ = _create_link(operator)
    token = path.removeprefix("/s/")
    for page in (anonymous.get(path).text, anonymous.get(path + "/export.html").text):
        for secret in (
            *SECRETS.values(),
            runner_token,
            api,
            "NCCL_DEBUG",
            "HF_TOKEN",
            "sglang_server",
            "--api-key",
            "argv",
            "recipe",
            "/models/",
        ):
            assert secret not in page, secret
        assert "<form" not in page and "hx-post" not in page and "csrf" not in page.lower()
        assert "fixture" not in page.lower().replace("fixture: eagle-3", "")  # no actor names
    other_path, _ = _create_link(operator, "someone else")
    assert other_path.removeprefix("/s/") not in anonymous.get(path).text
    assert token  # the page may carry its own token only in its export link
    assert anonymous.get(path).text.count(token) == 1


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_everything_under_s_is_read_only(operator, anonymous, method):
    path, _ = _create_link(operator)
    for target in (path, path + "/export.html", "/s/", "/s/anything/else", path + "/revoke"):
        r = anonymous.request(method, target, data={"name": "x"})
        assert r.status_code in (403, 405), (method, target, r.status_code)
    # Even a logged-in operator cannot change anything through /s/.
    assert operator.request(method, path).status_code == 405


def test_revoked_and_altered_links_404(operator, anonymous):
    path, link_id = _create_link(operator)
    assert anonymous.get(path).status_code == 200
    token = path.removeprefix("/s/")
    payload, signature = token.rsplit(".", 1)
    altered = [
        payload[:-1] + ("A" if payload[-1] != "A" else "B") + "." + signature,
        payload + "." + signature[:-2] + ("xy" if signature[-2:] != "xy" else "zz"),
        token[:-1],
        "nothing",
        "eyJpZCI6MSwibiI6IngifQ.bogus",
    ]
    for bad in altered:
        assert anonymous.get(f"/s/{bad}").status_code == 404, bad
        assert anonymous.get(f"/s/{bad}/export.html").status_code == 404
    r = operator.post(f"/campaigns/{SLUG}/share-links/{link_id}/revoke", headers={"HX-Request": "true"})
    assert r.status_code == 200 and re.search(rf'id="share-link-{link_id}"[^>]*class="revoked', r.text)
    assert anonymous.get(path).status_code == 404
    assert anonymous.get(path + "/export.html").status_code == 404
    assert "not valid" in anonymous.get(path).text


def test_a_token_signed_with_another_secret_is_refused(fixture_app, operator, anonymous):
    from app.domain.sharing import share_token
    from app.models import ShareLink

    _path, link_id = _create_link(operator)
    with session_scope(app_state(fixture_app).engine) as session:
        link = session.get(ShareLink, link_id)
        assert link is not None
        forged = share_token(link, "another-secret")
        assert share_token(link, app_state(fixture_app).settings.resolved_secret_key()) != forged
    assert anonymous.get(f"/s/{forged}").status_code == 404


def test_export_is_self_contained(operator, anonymous):
    path, _ = _create_link(operator)
    r = anonymous.get(path + "/export.html")
    assert r.status_code == 200 and r.headers["content-disposition"].startswith("attachment; filename=")
    library = PLOTLY_JS.read_text(encoding="utf-8")
    assert library in r.text  # plotly.js inline, whole
    page = r.text.replace(library, "")
    assert "src=" not in page and "<link" not in page and "@import" not in page  # nothing else to fetch
    assert not re.search(r"https?://", page)
    assert 'id="figure-break-even"' in page and 'id="figure-throughput"' in page and "@media print" in page


def test_share_links_need_an_operator(fixture_app, anonymous):
    assert anonymous.get(f"/campaigns/{SLUG}/share-links", follow_redirects=False).status_code in (303, 401)
    assert anonymous.post(f"/campaigns/{SLUG}/share-links", data={"name": "x"}).status_code == 401


def test_share_link_management_needs_csrf(operator):
    r = operator.post(f"/campaigns/{SLUG}/share-links", data={"name": "x"}, headers={"X-CSRF-Token": "wrong"})
    assert r.status_code == 403


def test_campaign_page_loads_the_share_links_partial(operator):
    html = operator.get(f"/campaigns/{SLUG}").text
    assert f'hx-get="/campaigns/{SLUG}/share-links"' in html
    partial = operator.get(f"/campaigns/{SLUG}/share-links").text
    assert "No share links yet" in partial and "<html" not in partial


def test_status_page_has_the_answer_over_batch_sizes(fixture_app, operator, anonymous):
    """The status page reads the same answer as the charts page and the API (its own partial)."""
    from tests.support.speculation import build_sweep_campaign

    with session_scope(app_state(fixture_app).engine) as session:
        build_sweep_campaign(session, slug="sweep-share")
    r = operator.post("/campaigns/sweep-share/share-links", data={"name": "batch"}, headers={"HX-Request": "true"})
    shown = re.search(r'class="share-url" readonly value="http://127.0.0.1([^"]+)"', r.text)
    assert shown, r.text
    path = shown.group(1)
    html = anonymous.get(path).text
    sentence = operator.get("/api/campaigns/sweep-share/answer").json()["sentence"]
    said = re.search(r'id="speculation">.*?data-sentence>(.*?)</p>', html, re.S)
    assert said and html_text(said.group(1)) == sentence  # its ranges and flags in one-line spans
    assert 'id="figure-speedup-batch"' in html and 'id="deploy"' in html
    assert "--speculative-algorithm EAGLE3" in html


def test_status_page_shows_the_replays_and_their_reports_without_runner_or_actor(fixture_app, operator, anonymous):
    with session_scope(app_state(fixture_app).engine) as s:
        campaign = campaigns.get_campaign(s, SLUG)
        first, second = campaigns.approaches(s, campaign)[:2]
        runner, runner_token = create_runner(s, "secret-node-name")
        runner.fingerprint = {"torch": "2.11.0+cu130", "cuda": "13.0"}
        s.add(runner)
        entries = [
            {"approach_id": first.id, "key": first.key, "title": first.title, "status": "dead_end",
             "reason": "KeyError: 12 in the symm-mem table", "trial_id": None, "stack": "torch 2.10.0+cu128",
             "bound": None, "retest": "re-test: torch 2.10.0+cu128 -> 2.11.0+cu130", "replay_trial_id": None},
            {"approach_id": second.id, "key": second.key, "title": second.title, "status": "deferred",
             "skipped": "no recipe"},
        ]  # fmt: skip
        s.add(
            Replay(
                campaign_id=campaign.id or 0,
                runner_id=runner.id,
                runner_name=runner.name,
                runner_fingerprint=runner.fingerprint,
                entries=entries,
                requested_by="actor-mallory",
            )
        )
        s.flush()
        number = s.exec(select(Replay.id)).one()
        assert s.exec(select(Runner).where(Runner.name == "secret-node-name")).one()
    path, _ = _create_link(operator)
    for page in (anonymous.get(path).text, anonymous.get(path + "/export.html").text):
        assert 'id="replays"' in page, page
        section = page[page.index('id="replays"') :]
        assert f"Replay #{number} on " in section and "running, 0 of 0 trials ended" in section
        assert first.title in section and "KeyError: 12 in the symm-mem table" in section
        assert "re-test: torch 2.10.0+cu128 -&gt; 2.11.0+cu130" in section and "no verdict yet" in section
        assert second.title in section and "not replayed: no recipe" in section
        for secret in ("secret-node-name", "actor-mallory", runner_token):
            assert secret not in page
