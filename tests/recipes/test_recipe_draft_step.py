"""The EAGLE-3 draft-step recipe and the decode step (verify_step at 1 token), run for real on CPU."""

from __future__ import annotations

import pytest

from runners.recipes import RecipeError, build_launch
from tests.support.recipes import by_name, metrics, run_module, run_spec

SMALL = {
    "device": "cpu",
    "hidden_size": 64,
    "vocab_size": 500,
    "ffn_size": 128,
    "heads": 4,
    "context_len": 16,
    "dtype": "fp32",
    "warmup": 1,
    "iters": 4,
    "calls": 3,
}


def test_draft_step_on_cpu_reports_ms_per_step_with_tags():
    spec = build_launch({"kind": "draft_step", "params": SMALL})
    assert spec.argv[1:3] == ["-m", "runners.recipes.draft_step"] and "--vocab-size=500" in spec.argv
    done = run_spec(spec)
    assert done.returncode == 0, done.stderr
    (draft,) = by_name(metrics(done.stdout), "draft_step_ms")
    tags = draft["tags"]
    assert draft["unit"] == "ms" and draft["value"] > 0
    assert tags["mode"] == "eager" and tags["device"] == "cpu" and tags["scaled"] is True
    assert tags["hidden_size"] == 64 and tags["vocab_size"] == 500 and tags["method"] == "nccl-tests"
    assert tags["timer"] == "perf_counter" and tags["iters"] == 4 and tags["calls_per_sample"] == 3
    assert len(draft["samples"]) == 4 and min(draft["samples"]) == pytest.approx(tags["min_ms"])
    assert tags["min_ms"] <= tags["p10_ms"] <= draft["value"] <= tags["p90_ms"] <= tags["max_ms"]
    assert "draft step (eager, cpu, hidden 64, vocab 500" in done.stdout


def test_draft_step_defaults_to_the_kimi_geometry_and_refuses_what_cannot_run():
    spec = build_launch({"kind": "draft_step", "params": {}})
    assert "--hidden-size=7168" in spec.argv and "--vocab-size=163840" in spec.argv
    for params, message in (
        ({"device": "cpu", "mode": "graph"}, "params.mode (--mode)"),
        ({"hidden_size": 100, "heads": 3}, "params.heads (--heads)"),
        ({"vocab": 10}, "params.vocab: unknown parameter"),
    ):
        try:
            build_launch({"kind": "draft_step", "params": params})
        except RecipeError as exc:
            assert message in str(exc)
        else:
            raise AssertionError(f"accepted {params}")
    done = run_module(
        "runners.recipes.draft_step",
        "--device",
        "cuda",
        "--hidden-size",
        "64",
        "--heads",
        "4",
        "--vocab-size",
        "10",
        "--ffn-size",
        "8",
        timeout=60,
    )
    assert done.returncode == 2 and "no CUDA GPU" in done.stderr and "Traceback" not in done.stderr


def test_verify_step_at_one_token_is_the_decode_step():
    spec = build_launch(
        {
            "kind": "verify_step",
            "params": {
                "backend": "gloo",
                "world_size": 2,
                "hidden_size": 128,
                "ffn_size": 256,
                "layers": 2,
                "tokens": 1,
                "warmup": 1,
                "iters": 3,
                "calls": 2,
            },
        }
    )
    done = run_spec(spec)
    assert done.returncode == 0, done.stderr
    found = metrics(done.stdout)
    (decode,) = by_name(found, "decode_step_ms")
    (verify,) = by_name(found, "verify_time_ms")
    assert decode["value"] == verify["value"] and decode["unit"] == "ms"
    assert decode["tags"]["tokens"] == 1 and decode["tags"]["backend"] == "gloo"
    assert decode["tags"]["method"] == "nccl-tests" and decode["tags"]["calls_per_sample"] == 2
    for metric in found:
        assert metric["tags"]["device"] == "cpu" and metric["tags"]["scaled"] is True, metric["name"]
    assert "decode step (1 token, gloo, eager)" in done.stdout


def test_verify_step_at_several_tokens_has_no_decode_step():
    done = run_module(
        "runners.recipes.verify_step",
        "--backend",
        "gloo",
        "--hidden-size",
        "64",
        "--ffn-size",
        "64",
        "--layers",
        "1",
        "--tokens",
        "2",
        "--warmup",
        "0",
        "--iters",
        "2",
        "--calls",
        "1",
    )
    assert done.returncode == 0, done.stderr
    assert by_name(metrics(done.stdout), "decode_step_ms") == []
