# mypy: disable-error-code="union-attr"
# (each test asserts the optional parts it reads: `result.started`, a regex that must match)
"""An approach whose trial ended reads "waiting for your verdict" beside its decided status (untested
here: a trial never decides) on the campaign page (badge, count, filterable data-states) and on its
own page."""

import re

from app.db import session_scope
from app.models import Role
from app.state import app_state
from tests.support.auth import add_user, login_token
from tests.support.verdicts import OLD_STACK, approach, end_trial, runner, seed


def test_a_tested_unconfirmed_approach_is_waiting_for_a_verdict(app, operator_client):
    seed(app_state(app).engine, {"key": "a", "title": "Tested"}, {"key": "b", "title": "Not yet"})
    with session_scope(app_state(app).engine) as s:
        trial = end_trial(s, approach(s, "a"), runner(s, "node-a", OLD_STACK), exit_code=1)
        trial_id = trial.id
    html = operator_client.get("/campaigns/c").text
    row_a = re.search(r'<tr id="approach-a".*?</tr>', html, re.S).group(0)
    row_b = re.search(r'<tr id="approach-b".*?</tr>', html, re.S).group(0)
    badge = re.compile(r'<span class="badge [^"]*"[^>]*>([^<]*)</span>')
    assert 'data-states="untested awaiting"' in row_a
    assert badge.findall(row_a) == ["untested", "waiting for your verdict"]
    assert 'data-states="untested"' in row_b and badge.findall(row_b) == ["untested"]
    counts = re.search(r'<ul class="counts".*?</ul>', html, re.S).group(0)
    assert re.search(r'data-doing="awaiting">.*?<b>1</b>', counts, re.S)
    assert re.search(r'data-status="untested">.*?<b>2</b>', counts, re.S)
    assert '<option value="awaiting">waiting for your verdict</option>' in html  # the status filter
    page = operator_client.get("/campaigns/c/approaches/a").text
    status_line = re.search(r'<p class="status-line">.*?</p>', page, re.S).group(0)
    assert "waiting for your verdict" in status_line and f'href="/trials/{trial_id}"' in status_line


def test_a_viewer_sees_the_waiting_proposal_but_no_confirm_link(app, client):
    """Issue 43, item 9: a viewer cannot confirm a verdict; the page shows the proposal, not a link to do it."""
    seed(app_state(app).engine, {"key": "a", "title": "Tested"})
    with session_scope(app_state(app).engine) as s:
        trial_id = end_trial(s, approach(s, "a"), runner(s, "node-a", OLD_STACK), exit_code=1).id
    add_user(app, "vera", Role.viewer)
    r = client.get(f"/login?token={login_token(app, 'vera')}", follow_redirects=False)
    assert r.status_code == 303
    page = client.get("/campaigns/c/approaches/a").text
    status_line = re.search(r'<p class="status-line">.*?</p>', page, re.S).group(0)
    assert "Confirm" not in status_line and "waits for an operator’s verdict" in status_line
    assert f'href="/trials/{trial_id}"' in status_line
    verdicts_box = client.get("/campaigns/c/verdicts").text
    assert "Waiting for an operator’s verdict" in verdicts_box and "your verdict" not in verdicts_box
