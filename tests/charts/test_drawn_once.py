"""What the charts and status pages draw of the answer is drawn once per answer (app/web/answer_view.py `_drawn`):
a page shown again with nothing new gets the same figures and their JSON without building them again, and a new
measurement, a new setting or another served range draws afresh, so a kept drawing never hides a change."""

from __future__ import annotations

import pytest

from app.db import session_scope
from app.domain import campaigns
from app.domain.answer import AnswerQuery
from app.domain.answer.read import read_answer
from app.state import app_state
from app.web import answer_view
from tests.support.speculation import SweepBuilder, build_sweep_campaign

SLUG = "drawn-once"


@pytest.fixture
def drawn(app, monkeypatch):
    """The sweep campaign, and how many times each of its drawings was built."""
    with session_scope(app_state(app).engine) as session:
        build_sweep_campaign(session, slug=SLUG, r=3)
    calls = {"figures": 0, "speculation": 0, "deploy": 0}
    figures, speculation, deploy = answer_view._answer_figures, answer_view._speculation_charts, answer_view._deploy

    def counted(name, build):
        def call(*args, **kwargs):
            calls[name] += 1
            return build(*args, **kwargs)

        return call

    monkeypatch.setattr(answer_view, "_answer_figures", counted("figures", figures))
    monkeypatch.setattr(answer_view, "_speculation_charts", counted("speculation", speculation))
    monkeypatch.setattr(answer_view, "_deploy", counted("deploy", deploy))
    return calls


def test_a_page_shown_again_is_the_same_and_draws_nothing_again(drawn, operator_client):
    first = operator_client.get(f"/campaigns/{SLUG}/charts")
    assert first.status_code == 200
    assert drawn == {"figures": 1, "speculation": 1, "deploy": 1}
    again = operator_client.get(f"/campaigns/{SLUG}/charts")
    assert drawn == {"figures": 1, "speculation": 1, "deploy": 1}
    assert again.text == first.text
    # Another served range is another Deploy panel, over the same figures.
    operator_client.get(f"/campaigns/{SLUG}/charts?serve_batches=1-8")
    assert drawn == {"figures": 1, "speculation": 1, "deploy": 2}


def test_a_new_measurement_or_setting_draws_afresh(app, drawn, operator_client):
    before = operator_client.get(f"/campaigns/{SLUG}/charts").text
    with session_scope(app_state(app).engine) as session:
        b = SweepBuilder(session, r=3)
        b.campaign = campaigns.get_campaign(session, SLUG)
        approach = campaigns.approaches(session, b.campaign)[0]
        b.trial(approach, [("allreduce_latency_us", 7777.0, {"bytes": 4096, "world_size": 2}, [7777.0, 7778.0])])
    after = operator_client.get(f"/campaigns/{SLUG}/charts").text
    assert drawn["figures"] == 2 and drawn["speculation"] == 2
    latency = '<script type="application/json" id="figure-latency">'
    assert after.split(latency)[1].split("</script>")[0] != before.split(latency)[1].split("</script>")[0]
    with session_scope(app_state(app).engine) as session:
        campaign = campaigns.get_campaign(session, SLUG)
        campaign.baseline_tok_s = 123.0
        session.add(campaign)
    operator_client.get(f"/campaigns/{SLUG}/charts")
    assert drawn["figures"] == 3


def test_drawings_live_on_their_answer_and_are_bounded_there(app, drawn, operator_client):
    # Kept on the answer itself (Answer.drawn): gone with the answer's entry in read_answer's bounded cache, never
    # kept beside it; and per answer, many served ranges keep only the most recent few.
    operator_client.get(f"/campaigns/{SLUG}/charts")
    with session_scope(app_state(app).engine) as session:
        answer = read_answer(session, campaigns.get_campaign(session, SLUG), AnswerQuery())
    assert "answer figures" in answer.drawn
    for n in range(1, answer_view._DRAWN_PER_ANSWER + 10):
        operator_client.get(f"/campaigns/{SLUG}/charts?serve_batches=1-{n}")
    assert len(answer.drawn) == answer_view._DRAWN_PER_ANSWER
    assert drawn["figures"] == 1  # the figures, used on every request, stayed
