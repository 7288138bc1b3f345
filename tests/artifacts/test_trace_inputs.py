"""A profiler trace feeds the profitability model: a stored trace's N_ar and t_ar become model inputs labelled
"from trace #id" and shown among the sources (SQLite and PostgreSQL), through a real server's upload and pages,
and from a real gloo profiled verify step."""

from __future__ import annotations

import httpx
import pytest
from sqlmodel import Session, create_engine, select

from app.db import session_scope
from app.domain import artifacts as store_domain
from app.domain.answer import approach_latency, load_campaign_metrics, model_inputs
from app.domain.scheduling import create_trial
from app.domain.trials import end_trial
from app.models import Approach, Artifact, Campaign, Metric, Runner, TrialState
from runners.artifacts import Client
from tests.support.artifacts import ended_trial
from tests.support.servers import ThreadServer
from tests.support.traces import cuda_trace
from tests.support.waiting import wait_for


def _read_trace_of(srv, trial_id: int) -> dict:
    """The trial's artifact's `trace` once the server's trace reader has kept it."""

    def read() -> dict | None:
        with session_scope(srv.engine) as session:
            return dict(session.exec(select(Artifact.trace).where(Artifact.trial_id == trial_id)).one() or {})

    return wait_for(read, what="the trace reader")


FORWARD = {
    "device": True,
    "steps": 3,
    "step_name": "verify_step",
    "step_us": 60000.0,
    "allreduces_per_step": 122.0,
    "allreduce_us": 190.5,
    "collectives": ["NCCL allreduce"],
    "kernels": 4,
}


def _campaign(session: Session) -> tuple[Campaign, list[Approach], Runner]:
    campaign = Campaign(slug="tr", name="Traces", baseline_tok_s=82.0, hidden_size=7168)
    session.add(campaign)
    session.flush()
    rows = []
    for i, key in enumerate(("nccl", "symm")):
        a = Approach(campaign_id=campaign.id or 0, key=key, title=key.upper(), position=i + 1)
        session.add(a)
        rows.append(a)
    runner = Runner(name="node-1", token_hash="x" * 64)
    session.add(runner)
    session.flush()
    return campaign, rows, runner


def _traced(session: Session, approach: Approach, runner: Runner, name: str, figures: dict) -> Artifact:
    t = create_trial(session, approach, runner, "ada")
    end_trial(session, t, TrialState.succeeded)
    row = Artifact(
        trial_id=t.id or 0, campaign_id=approach.campaign_id, name=name, size=1, sha256="a" * 64, content_type=""
    )
    session.add(row)
    session.flush()
    assert store_domain.set_trace(session, row.id or 0, "a" * 64, figures) is row
    return row


def _verify_compute(trace: Artifact, approach: Approach, value: float, **tags: object) -> Metric:
    """A gloo verify step's figure on the traced trial (its tags say whether it ran the full geometry)."""
    return Metric(
        trial_id=trace.trial_id,
        campaign_id=trace.campaign_id,
        approach_id=approach.id or 0,
        seq=1,
        index=0,
        name="verify_compute_ms",
        value=value,
        unit="ms",
        tags={"backend": "gloo", "tokens": 4, **tags},
    )


def test_a_traces_counts_are_model_inputs_from_trace_id(db_url):
    engine = create_engine(db_url)
    with session_scope(engine) as session:
        campaign, (nccl, symm), runner = _campaign(session)
        campaign.allreduces_per_verify = None
        inputs = model_inputs(session, campaign)
        assert inputs.allreduces_per_verify.value is None
        assert any("profile: true" in m.how for m in inputs.missing)
        campaign.allreduces_per_verify = 122  # the field's default, typed by nobody

        draft = _traced(session, nccl, runner, "draft.trace.json", {**FORWARD, "step_name": "draft_step"})
        kept = model_inputs(session, campaign).allreduces_per_verify  # a draft head's count is not N_ar
        assert (kept.value, kept.source) == (122, "entered on the campaign")
        verify = _traced(session, nccl, runner, "verify.trace.json", FORWARD)
        inputs = model_inputs(session, campaign)
        assert inputs.allreduces_per_verify.value == 122
        assert inputs.allreduces_per_verify.source.startswith(f"from trace #{verify.id} (trial #")
        assert "verify_step x 3" in inputs.allreduces_per_verify.source
        assert "default" not in inputs.allreduces_per_verify.source  # the same count: nothing replaced
        assert ("Allreduces per verify", inputs.allreduces_per_verify) in inputs.sources()
        campaign.hidden_size = 4096  # (only so that the campaign row changes)
        verify.trace = {**FORWARD, "allreduces_per_step": 64.0}
        session.add(verify)
        session.flush()
        sixty_four = model_inputs(session, campaign).allreduces_per_verify
        assert sixty_four.value == 64 and sixty_four.source.endswith("; replaces the default 122")
        verify.trace = FORWARD
        session.add(verify)
        session.flush()
        metrics = load_campaign_metrics(session, campaign)
        latency = approach_latency(metrics, nccl.id or 0, inputs)
        assert latency is not None and latency.method == "trace" and latency.t_ar_us == pytest.approx(190.5)
        assert latency.note.startswith(f"from trace #{verify.id}")
        assert approach_latency(metrics, symm.id or 0, inputs) is None  # another approach's trace is not its t_ar
        # Typed on the campaign, the value wins, and its source says what the trace counts.
        campaign.allreduces_per_verify = 120
        session.add(campaign)
        session.flush()
        typed = model_inputs(session, campaign).allreduces_per_verify
        assert typed.value == 120 and f"trace #{verify.id} counts 122" in typed.source
        # A removed trace is no evidence; an unread or refused one neither.
        campaign.allreduces_per_verify = 122
        campaign.input_sources = {"allreduces_per_verify": "the model card: 61 layers"}
        session.add(campaign)
        session.flush()
        stated = model_inputs(session, campaign).allreduces_per_verify
        assert stated.value == 122 and stated.source == "entered: the model card: 61 layers"  # agrees: no note
        campaign.allreduces_per_verify, campaign.input_sources = None, None
        verify.removed_at = verify.created_at
        session.add_all([campaign, verify])
        session.flush()
        assert model_inputs(session, campaign).allreduces_per_verify.value is None
        assert draft.id is not None


def test_a_cpu_trace_counts_only_at_the_full_geometry_and_never_gives_t_ar(db_url):
    engine = create_engine(db_url)
    with session_scope(engine) as session:
        campaign, (nccl, _), runner = _campaign(session)
        campaign.allreduces_per_verify = None
        cpu = {**FORWARD, "device": False, "allreduce_us": 900.0, "collectives": ["gloo allreduce"]}
        scaled = _traced(session, nccl, runner, "v.trace.json", {**cpu, "allreduces_per_step": 8.0})
        session.add(_verify_compute(scaled, nccl, 3.0, scaled=True))
        session.flush()
        inputs = model_inputs(session, campaign)
        assert inputs.allreduces_per_verify.value is None  # 4 layers of a scaled-down model: not the model's N_ar
        full = _traced(session, nccl, runner, "w.trace.json", cpu)
        assert model_inputs(session, campaign).allreduces_per_verify.value is None  # its geometry is not known
        session.add(_verify_compute(full, nccl, 30.0))
        session.flush()
        inputs = model_inputs(session, campaign)
        assert inputs.allreduces_per_verify.value == 122 and "CPU spans" in inputs.allreduces_per_verify.source
        assert f"trace #{full.id}" in inputs.allreduces_per_verify.source
        assert approach_latency(load_campaign_metrics(session, campaign), nccl.id or 0, inputs) is None


def test_an_uploaded_trace_is_read_once_and_feeds_the_campaigns_pages(server, tmp_path):
    trial_id, token = ended_trial(server)
    trace = cuda_trace(
        tmp_path / "verify.trace.json", [("gemm", 40.0), ("ncclDevKernel_AllReduce_Sum_bf16", 17.0)] * 61
    )
    Client(server.url, token).upload(trial_id, "verify.trace.json", trace)
    figures = _read_trace_of(server, trial_id)  # read after the upload's response, off the event loop
    assert figures["allreduces_per_step"] == 61 and figures["device"] is True
    with session_scope(server.engine) as session:
        trace_id = session.exec(select(Artifact.id).where(Artifact.trial_id == trial_id)).one()
        campaign = session.exec(select(Campaign).where(Campaign.slug == "spec")).one()
        campaign.baseline_tok_s = 82.0
        session.add(campaign)
    table = httpx.get(f"{server.url}/api/trials/{trial_id}/kernels", headers=server.api_headers()).json()
    assert table["trace_id"] == trace_id
    cookies = {"cb_session": server.session_cookie()}
    fragment = httpx.get(f"{server.url}/trials/{trial_id}/artifacts", cookies=cookies).text
    assert f'"from trace #{trace_id}"' in fragment and "N_ar 61" in fragment and "t_ar 17 us" in fragment
    charts = httpx.get(f"{server.url}/campaigns/spec/charts", cookies=cookies)
    assert charts.status_code == 200
    assert f"from trace #{trace_id}" in charts.text  # among the model inputs' sources
    # Not a trace: said on the row and the page, and nothing feeds the model.
    other, token2 = ended_trial(server, "node-2")
    bad = tmp_path / "bad.trace.json"
    bad.write_text("this is not json")
    Client(server.url, token2).upload(other, "bad.trace.json", bad)
    assert "not a Chrome trace" in _read_trace_of(server, other)["error"]


def test_a_trace_not_read_before_the_server_stopped_is_read_when_it_starts(server, tmp_path):
    trial_id, token = ended_trial(server)
    trace = cuda_trace(tmp_path / "verify.trace.json", [("gemm", 40.0), ("ncclDevKernel_AllReduce_Sum_bf16", 9.0)] * 4)
    Client(server.url, token).upload(trial_id, "verify.trace.json", trace)
    _read_trace_of(server, trial_id)
    server.stop()
    with session_scope(server.engine) as session:
        row = session.exec(select(Artifact).where(Artifact.trial_id == trial_id)).one()
        row.trace = None  # as a row stored before migration 0014, or uploaded just before the server stopped
        session.add(row)
    with session_scope(server.engine) as session:
        assert row.id in store_domain.unread_traces(session)
    # The kernel table is read from the file meanwhile (a GET, maybe in a page worker: it writes nothing).
    again = ThreadServer(server.settings).start()
    try:
        assert _read_trace_of(again, trial_id)["allreduces_per_step"] == 4  # the reader's sweep at start
        table = httpx.get(f"{again.url}/api/trials/{trial_id}/kernels", headers=again.api_headers()).json()
        assert table["allreduces_per_step"] == 4
    finally:
        again.stop()
