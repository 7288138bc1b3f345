"""The vLLM demo campaign on a board: "Run next candidate" with a runner that lacks vLLM says so and names the
one command that makes it; a runner whose fingerprint has vLLM (the `.cache/vllm` of `make engine`) gets the
first approach dispatched, its recipe the demo's vllm_server recipe."""

from __future__ import annotations

from app.db import session_scope
from app.domain.campaign_files import import_campaign
from app.domain.demo import DEMO_DIR
from tests.support.trials import FINGERPRINT, ProtocolRunner, new_runner_token, run_next

SLUG = "vllm-speculation-cpu"


def _load(server) -> None:
    with session_scope(server.engine) as session:
        import_campaign(session, (DEMO_DIR / f"{SLUG}.yaml").read_text(), actor="test")


def test_without_vllm_the_answer_names_make_engine(server):
    _load(server)
    _, token = new_runner_token(server.engine)
    runner = ProtocolRunner(server.ws_url, token, fingerprint={**FINGERPRINT, "gpu_count": 0, "gpus": [], "vllm": None})
    try:
        said = run_next(server, SLUG)
        assert not said.get("started"), said
        assert "needs vllm (run 'make engine' in the runner's checkout" in said["reason"], said
    finally:
        runner.close()


def test_with_vllm_the_first_approach_runs(server):
    _load(server)
    _, token = new_runner_token(server.engine)
    runner = ProtocolRunner(server.ws_url, token, fingerprint={**FINGERPRINT, "gpu_count": 0, "vllm": "0.32.0"})
    try:
        started = run_next(server, SLUG)
        assert started["started"] and started["approach"] == "no-speculation", started
        dispatch = runner.expect("dispatch")
        assert dispatch.recipe["kind"] == "vllm_server"
        assert dispatch.recipe["params"]["vllm_python"] == "./.cache/vllm/venv/bin/python"
    finally:
        runner.close()
