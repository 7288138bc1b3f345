"""Issue 43, item 6: a refused form post (Repeat of an approach no runner can run, a settle of an approach
with itself, a bad value) answers the app's page: navigation and the person, the reason, and a way back
to the page the form was on. app/errors.py is the one place that maps domain errors to HTTP."""

from __future__ import annotations

import re

import pytest

from app.db import session_scope
from app.state import app_state
from tests.support.verdicts import OLD_STACK, runner, seed


@pytest.fixture
def board(app, operator_client):
    engine = app_state(app).engine
    seed(engine, {"key": "a", "title": "Eight GPUs"}, {"key": "b", "title": "Other"})
    with session_scope(engine) as s:
        runner(s, "small", {**OLD_STACK, "gpu_count": 1, "gpus": OLD_STACK["gpus"][:1]})
    return operator_client


def _page(r) -> str:
    assert r.headers["content-type"].startswith("text/html"), r.headers
    html = r.text
    assert "<nav>" in html and 'href="/runners"' in html  # the app's navigation
    assert re.search(r'class="whoami"[^>]*>\s*\S+', html)  # and who is logged in
    return html


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ({"a": "a", "budget": "3"}, "Eight GPUs needs 8 GPUs: no connected runner has them"),
        ({"a": "b", "b": "b", "budget": "3"}, "Settle compares two different approaches."),
        ({"a": "a", "budget": "999"}, "budget"),
    ],
)
def test_a_refused_repeat_shows_the_reason_on_the_apps_page_with_a_way_back(board, data, reason):
    came_from = str(board.base_url).rstrip("/") + "/campaigns/c/approaches/a"
    r = board.post("/campaigns/c/settle", data=data, headers={"Referer": came_from}, follow_redirects=False)
    assert r.status_code == 422
    html = _page(r)
    assert reason in html
    assert 'href="/campaigns/c/approaches/a"' in html and "Back to" in html


def test_the_way_back_never_leaves_the_board(board):
    r = board.post("/campaigns/c/settle", data={"a": "b", "b": "b"}, headers={"Referer": "https://evil.example/x"})
    html = _page(r)
    assert "evil.example" not in html and 'href="/campaigns/c"' in html  # the campaign the form was about


def test_a_bad_slug_is_refused_in_words(board, api_headers):
    """Issue 43, item 9: not "String should match pattern '^[a-z0-9][a-z0-9-]{0,79}$'"."""
    r = board.post("/api/campaigns", json={"slug": "My Campaign", "name": "x"}, headers=api_headers)
    assert r.status_code == 422
    assert r.json()["detail"] == (
        "slug: use 1 to 80 lowercase letters, digits and dashes, starting with a letter or a digit "
        "(like kimi-k25-eagle3)"
    )
    page = board.post("/campaigns", data={"slug": "My Campaign", "name": "x"})
    assert "lowercase letters, digits and dashes" in page.text and "should match pattern" not in page.text
