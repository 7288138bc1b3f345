"""One trial of the real engine through the board, in Chromium: a `campaign serve` with its embedded runner
runs a vllm_server approach (vLLM 0.32 CPU from .cache/vllm, n-gram k = 3) on "Run next candidate"; the
trial page shows the engine's own log while the trial runs, then the engine's figures. Serial: it starts
two ~3 GiB servers on a 2-core machine."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from app.db import make_engine, session_scope
from app.domain.logins import create_login_token
from tests.support.servers import start_live_server, stop_live_server
from tests.support.trials import seed_campaign
from tests.support.vllm import NGRAM_K3, TARGET, port_pair, vllm_python

pytestmark = [pytest.mark.browser, pytest.mark.serial]


def test_a_vllm_trial_shows_the_engines_log_live_and_ends_with_its_figures(tmp_path, browser):
    recipe = {
        "kind": "vllm_server",
        "params": {
            "model": str(TARGET),
            "vllm_python": vllm_python(),
            "speculative_config": NGRAM_K3,
            "batch": [1],
            "pairs": 2,
            "input_len": 64,
            "output_len": 32,
            "max_model_len": 512,
            "warmup_requests": 1,
            "port": port_pair(),
        },
        "timeout_s": 900,
    }
    db_url = f"sqlite:///{tmp_path / 'e2e.db'}"
    server = start_live_server(tmp_path, db_url)  # with its embedded runner (its fingerprint: this vLLM)
    engine = make_engine(db_url)
    page = browser.new_page()
    try:
        seed_campaign(
            engine,
            "vllm",
            [
                {
                    "key": "ngram-k3",
                    "title": "n-gram, k = 3",
                    "recipe": recipe,
                    "requirements": {"gpus": 0, "software": ["vllm"]},
                }
            ],
        )
        with session_scope(engine) as session:
            token = create_login_token(session, 900)
        page.goto(f"{server.url}/login?token={token}")
        page.goto(f"{server.url}/campaigns/vllm")
        for _ in range(60):
            with page.expect_response(lambda r: r.url.endswith("/run-next")) as answer:
                page.click("#run-next-button")
            said = answer.value.text()
            if "Started" in said:
                page.wait_for_selector("#run-next-result:has-text('Started')")
                break
            assert "no runner is connected" in said, said
            page.wait_for_timeout(500)
        page.click("#run-next-result a")
        # The engine's own startup lines, streamed while the trial runs (the windows have not begun).
        page.wait_for_selector("#log:has-text('Starting vLLM server')", timeout=400_000)
        expect(page.locator("[data-live=state] .badge")).to_have_text("running", use_inner_text=True)
        page.wait_for_selector("[data-live=state] [data-state=succeeded]", timeout=400_000)
        expect(page.locator("[data-live=exit]")).to_have_text("0", use_inner_text=True)
        log = page.inner_text("#log")
        assert "SpecDecoding metrics" in log  # the engine's acceptance lines, beside the recipe's
        assert "vllm_server: the speculation-on server (process group" in log
        metrics = page.locator("#metrics table.metrics")
        expect(metrics).to_be_visible(timeout=30_000)
        names = set(page.locator("#metrics table.metrics tbody tr td:first-child").all_inner_texts())
        assert {
            "engine_output_tok_s",
            "engine_tpot_ms",
            "engine_request_latency_ms",
            "engine_speedup",
            "engine_step_ms",
            "engine_accept_length",
            "engine_accept_rate_pos",
        } <= names
        # The prediction row: the charts page checks the engine's own counting (tau x step off / step on, this
        # trial's figures) against the speedup the trial measured, and says held or missed, never hides it.
        page.goto(f"{server.url}/campaigns/vllm/charts")
        row = page.locator("#engine-check tr[data-cell='1,3'][data-prediction=\"engine's counting\"]")
        expect(row).to_have_count(1)
        assert row.get_attribute("data-held") in {"held", "missed"}
        verdict = row.locator("[data-verdict]").inner_text()
        assert verdict.startswith(("held", "missed by")), verdict
        assert "one trial" in page.inner_text("#engine-check [data-measured]")
    finally:
        page.close()
        engine.dispose()
        stop_live_server(server)
