"""engine_acceptance against a stand-in engine's Prometheus exposition (tests/standins/prometheus_standin.py),
in vLLM's and SGLang's metric names, the recipe run as a real subprocess over real HTTP.

The stand-in advances its counters in ticks of one known acceptance (vLLM: per 10 drafts 8, 5, 3 accepted at
positions 1-3; SGLang: 26 tokens per 10 verify calls), after warm-up ticks of another (every draft accepted),
so the window's figures are known exactly and differ from a cumulative reading.
"""

from __future__ import annotations

import json
import sys

import pytest

from app.protocol.metrics import ConditionTag as C
from app.protocol.metrics import MetricName as M
from app.state import app_state
from runners.recipes import build_launch
from tests.standins.prometheus_standin import EngineStandin
from tests.support.net import free_port
from tests.support.recipes import by_name, metrics, run_module

MODULE = "runners.recipes.engine_acceptance"
# vLLM tick: u = (0.8, 0.5, 0.3) -> alpha = (0.8, 0.625, 0.6), tau(1..3) = 1.8, 2.3, 2.6.
RATES = (0.8, 0.5, 0.3)
ALPHAS = (0.8, 0.625, 0.6)
TAUS = {1: 1.8, 2: 2.3, 3: 2.6}


def run(*args: str, timeout: float = 60):
    return run_module(MODULE, *args, timeout=timeout)


def post_ticks(url: str, ticks: int, *, restart_first: bool = False, new_process: bool = False) -> list[str]:
    """A load command: a child process that drives the stand-in as a benchmark drives an engine."""
    argv = [sys.executable, "-m", "tests.standins.prometheus_standin", url, str(ticks)]
    argv += (["--restart"] if restart_first else []) + (["--new-process"] if new_process else [])
    return [f"--load-arg={a}" for a in argv]


def test_vllm_window_gives_the_windows_accept_lengths_rates_and_alphas(tmp_path):
    log = tmp_path / "vllm.log"
    with EngineStandin("vllm", tick_s=0.05, log_path=str(log)) as engine:
        done = run(
            "--url",
            engine.url,
            "--window-s",
            "0.6",
            "--settle-s",
            "0",
            "--engine-log",
            str(log),
            "--speculative-method",
            "eagle3",
        )
    assert done.returncode == 0, done.stdout + done.stderr
    found = metrics(done.stdout)
    taus = by_name(found, M.ENGINE_ACCEPT_LENGTH)
    assert {m["tags"][C.DRAFT_TOKENS]: m["value"] for m in taus} == pytest.approx(TAUS)
    measured = taus[-1]  # the measured one comes last (readers taking one row take the last)
    assert measured["tags"][C.DRAFT_TOKENS] == 3 and measured["tags"]["derivation"] == "1 + accepted / drafts"
    tags = measured["tags"]
    assert tags["engine"] == "vllm" and tags["engine_version"] == "0.11.0"
    assert tags["method"] == "prometheus-counter-delta" and tags["window"] == "sleep" and tags["window_s"] > 0.5
    assert tags[C.TOPK] == 1 and tags["num_speculative_tokens"] == 3 and tags["speculative_method"] == "eagle3"
    drafts = tags["window_drafts"]
    assert drafts > 0 and drafts % 10 == 0  # whole ticks only
    assert tags["window_draft_tokens"] == 3 * drafts and tags["window_accepted_tokens"] == 16 * drafts // 10
    assert tags["per_position_sum_matches"] is True
    # The cumulative figure since start (warm-up at tau 4 included) is not what was measured.
    total_drafts = drafts + 50
    assert measured["value"] != pytest.approx(1 + (16 * drafts / 10 + 150) / total_drafts)
    rates = by_name(found, M.ENGINE_ACCEPT_RATE_POS)
    assert [m["tags"]["position"] for m in rates] == [1, 2, 3]
    assert [m["value"] for m in rates] == pytest.approx(RATES)
    assert all(m["tags"]["rate"].startswith("unconditional") for m in rates)
    alphas = by_name(found, M.ENGINE_ACCEPT_ALPHA_POS)
    assert [m["value"] for m in alphas] == pytest.approx(ALPHAS)
    assert all(m["tags"]["rate"].startswith("conditional") for m in alphas)
    # The independent method in the same run: vLLM's own SpecDecoding log lines written in the window.
    (logged,) = by_name(found, M.ENGINE_LOG_ACCEPT_LENGTH)
    assert logged["value"] == pytest.approx(2.6) and logged["tags"]["method"] == "vllm-log-lines"
    assert logged["tags"]["lines"] >= 1


def test_vllm_window_made_by_a_load_command_counts_exactly_its_drafts():
    with EngineStandin("vllm", tick_s=None) as engine:
        done = run("--url", engine.url, "--settle-s", "0", *post_ticks(engine.url, 7))
    assert done.returncode == 0, done.stdout + done.stderr
    measured = by_name(metrics(done.stdout), M.ENGINE_ACCEPT_LENGTH)[-1]
    assert measured["value"] == pytest.approx(2.6)
    assert measured["tags"]["window"] == "load"
    assert (measured["tags"]["window_drafts"], measured["tags"]["window_accepted_tokens"]) == (70, 112)


def test_sglang_window_differences_its_counters_and_flags_the_cumulative_one(tmp_path):
    log = tmp_path / "sglang.log"
    with EngineStandin("sglang", tick_s=0.05, log_path=str(log)) as engine:
        done = run("--url", engine.url, "--window-s", "0.6", "--settle-s", "0", "--engine-log", str(log))
    assert done.returncode == 0, done.stdout + done.stderr
    found = metrics(done.stdout)
    (measured,) = by_name(found, M.ENGINE_ACCEPT_LENGTH)  # no per-position counters: one k
    tags = measured["tags"]
    assert measured["value"] == pytest.approx(2.6)
    assert tags["engine"] == "sglang" and tags["engine_version"] == "0.5.23"
    assert tags[C.DRAFT_TOKENS] == 3 and tags[C.TOPK] == 1 and tags["speculative_algorithm"] == "EAGLE3"
    assert tags["speculative_num_draft_tokens"] == 4 and tags["method"] == "prometheus-counter-delta"
    verify = tags["window_verify_calls"]
    assert verify > 0 and verify % 10 == 0 and tags["window_generation_tokens"] == 26 * verify // 10
    assert tags["window_draft_tokens"] == 3 * verify  # verify calls x (num_draft_tokens - 1), as SGLang counts
    assert tags["gauge_spec_accept_length"] == pytest.approx(2.6)
    (cumulative,) = by_name(found, M.SERVER_ACCEPT_LENGTH)
    assert cumulative["tags"]["cumulative"] is True and cumulative["tags"]["method"] == "server-info-cumulative"
    assert cumulative["value"] > 2.6  # it still holds the warm-up's tau 4
    assert not by_name(found, M.ENGINE_ACCEPT_RATE_POS)
    (decode_log,) = by_name(found, M.DECODE_LOG_ACCEPT_LEN)
    assert decode_log["value"] == pytest.approx(2.6)


@pytest.mark.parametrize("engine_name", ["vllm", "sglang"])
def test_a_counter_reset_in_the_window_is_refused(engine_name):
    with EngineStandin(engine_name, tick_s=None) as engine:
        engine.advance(n=20)  # the counters stand above what the restarted engine will reach
        done = run("--url", engine.url, "--settle-s", "0", *post_ticks(engine.url, 3, restart_first=True))
    assert done.returncode == 5, done.stdout + done.stderr
    assert "went down" in done.stdout and "cannot be differenced" in done.stdout
    assert not metrics(done.stdout)


def test_a_restart_is_refused_even_when_the_counters_grew_past_their_start():
    with EngineStandin("vllm", tick_s=None) as engine:  # 5 warm-up ticks before the window; 30 after a restart
        done = run(
            "--url", engine.url, "--settle-s", "0", *post_ticks(engine.url, 30, restart_first=True, new_process=True)
        )
    assert done.returncode == 5, done.stdout + done.stderr
    assert "the engine restarted in the window (process_start_time_seconds" in done.stdout
    assert not metrics(done.stdout)


@pytest.mark.parametrize("engine_name", ["vllm", "sglang"])
def test_an_engine_without_speculation_is_answered_clearly(engine_name):
    with EngineStandin(engine_name, speculative=False, tick_s=0.05) as engine:
        done = run("--url", engine.url, "--window-s", "30")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "runs no speculative decoding" in done.stdout
    assert "@@campaign-phase window" not in done.stdout  # refused before the 30 s window is spent


def test_an_unreachable_server_is_answered_clearly():
    url = f"http://127.0.0.1:{free_port()}"
    done = run("--url", url, "--window-s", "1")
    assert done.returncode == 3
    assert f"cannot reach {url}/metrics" in done.stdout


def test_a_window_without_drafts_says_so():
    with EngineStandin("vllm", tick_s=None) as engine:
        done = run("--url", engine.url, "--window-s", "0.2", "--settle-s", "0")
    assert done.returncode == 6 and "no drafts in the window" in done.stdout


def test_a_k_other_than_the_engines_is_refused():
    with EngineStandin("vllm", tick_s=0.05) as engine:
        done = run("--url", engine.url, "--window-s", "0.2", "--settle-s", "0", "--num-speculative-tokens", "4")
    assert done.returncode == 4 and "counts 3 draft positions, not the 4" in done.stdout


def test_the_recipe_is_one_kind_of_the_registry():
    spec = build_launch(
        {"kind": "engine_acceptance", "params": {"url": "http://10.0.0.7:8000/", "load_args": ["bench", "--n=3"]}},
        python="py",
    )
    assert spec.argv[:3] == ["py", "-m", MODULE]
    assert "--url=http://10.0.0.7:8000" in spec.argv and "--load-args=--n=3" in spec.argv
    bad = run("--url", "10.0.0.7:8000")
    assert bad.returncode == 2 and "params.url (--url)" in bad.stderr


def test_the_answer_takes_the_engines_accept_length_per_k(app):
    """The recipe's real output, cut into metric rows by the log path, read by the answer's loader as tau(k)."""
    from sqlmodel import select

    from app.db import session_scope
    from app.domain import campaigns, logs
    from app.domain.answer.read import read_answer
    from app.models import Campaign, Trial
    from app.schemas import ApproachCreate, RecipeSpec
    from tests.support.speculation import SLUG, build_sweep_campaign

    with EngineStandin("vllm", tick_s=0.05) as engine:
        done = run("--url", engine.url, "--window-s", "0.4", "--settle-s", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    with session_scope(app_state(app).engine) as session:
        build_sweep_campaign(session)
        campaign = session.exec(select(Campaign).where(Campaign.slug == SLUG)).one()
        campaign.accept_alphas = None  # entered acceptance takes precedence over a measured one (typed > measured)
        approach = campaigns.add_approach(
            session,
            campaign,
            ApproachCreate(
                key="acceptance",
                title="vLLM acceptance",
                recipe=RecipeSpec.model_validate({"kind": "engine_acceptance", "params": {"url": engine.url}}),
            ),
            actor="fixture",
        )
        assert campaign.id is not None and approach.id is not None
        trial = Trial(
            campaign_id=campaign.id,
            approach_id=approach.id,
            recipe=approach.recipe or {},
            state="succeeded",
            phase="done",
            requested_by="fixture",
        )
        session.add(trial)
        session.flush()
        found = logs.LineCursor().feed(0, done.stdout)
        assert found
        logs._save_metrics(session, trial, found, only_missing=False)
        session.flush()
        spec = read_answer(session, campaign).speculation
        for k, tau in TAUS.items():
            assert spec.tau[k].value == pytest.approx(tau), k
            assert f"trial #{trial.id}" in spec.tau_sources[k] and M.ENGINE_ACCEPT_LENGTH in spec.tau_sources[k]
        assert 4 not in spec.tau or spec.tau[4].value != pytest.approx(2.6)  # k = 4 was not measured here
    json.dumps(found[0][2])  # the rows are the recipe's own JSON


def test_a_drop_in_acceptance_over_trials_is_a_change_point(app):
    """The change points watch the recipe's series as they watch any other: its real lines, over 20 trials
    whose acceptance drops by 10% at the eleventh, give a "slower" change point at that trial."""
    import numpy as np

    from app.db import session_scope
    from app.domain import changes
    from tests.support.verdicts import OLD_STACK, approach, end_trial, runner, seed

    with EngineStandin("vllm", tick_s=0.05) as engine:
        done = run("--url", engine.url, "--window-s", "0.3", "--settle-s", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = metrics(done.stdout)
    rng = np.random.default_rng(3)
    seed(app_state(app).engine, {"key": "acceptance"})
    with session_scope(app_state(app).engine) as s:
        node, a = runner(s, "node-a", OLD_STACK), approach(s, "acceptance")
        trials = []
        for i in range(20):
            scale = (1.0 if i < 10 else 0.9) * float(rng.normal(1.0, 0.01))
            trials.append(end_trial(s, a, node, metrics=[{**m, "value": m["value"] * scale} for m in lines]))
    with session_scope(app_state(app).engine) as s:
        changes.pass_once(s)
        found = {(c.metric, c.point): c for c in changes.of_approach(s, approach(s, "acceptance"))}
    key = (M.ENGINE_ACCEPT_LENGTH, "derivation=1 + accepted / drafts, draft_tokens=3")
    assert key in found, sorted(found)
    assert found[key].verdict == "slower" and found[key].trial_id == trials[10].id
    assert found[key].ratio == pytest.approx(0.9, abs=0.02)


def test_log_lines_of_drafts_shorter_than_k_give_the_counters_accept_length():
    """An n-gram drafter proposes fewer than k tokens when it finds no match, so `Drafted` is not drafts x k:
    each line's drafts come from its per-position rates (accepted at i / drafts). These two lines are vLLM
    0.32's own format (SpecDecodingLogging.log) for 100 and 40 drafts at k = 3 that proposed 274 and 100 tokens;
    over both, the counters' accept length is 1 + (237 + 80) / 140."""
    from runners.recipes.engine_acceptance import VLLM_LOG_LINE, log_line_drafts

    lines = [
        "INFO 12-05 17:00:00 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 3.37, Accepted "
        "throughput: 40.00 tokens/s, Drafted throughput: 75.00 tokens/s, Accepted: 237 tokens, Drafted: 274 tokens, "
        "Per-position acceptance rate: 0.910, 0.760, 0.700, Avg Draft acceptance rate: 86.5%",
        "INFO 12-05 17:00:01 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 3.00, Accepted "
        "throughput: 40.00 tokens/s, Drafted throughput: 75.00 tokens/s, Accepted: 80 tokens, Drafted: 100 tokens, "
        "Per-position acceptance rate: 0.800, 0.650, 0.550, Avg Draft acceptance rate: 80.0%",
    ]
    found = [m for m in map(VLLM_LOG_LINE.search, lines) if m]
    assert [log_line_drafts(m, 3) for m in found] == [100, 40]
    tau = 1 + sum(int(m.group("accepted")) for m in found) / sum(log_line_drafts(m, 3) for m in found)
    assert tau == pytest.approx(1 + 317 / 140)
    # The old reading, 1 + k x accepted / drafted, said 3.54 here: drafts that proposed fewer than k tokens.
    assert 1 + 3 * 317 / 374 == pytest.approx(3.543, abs=1e-3)
