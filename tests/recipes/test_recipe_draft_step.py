"""The EAGLE-3 draft-step recipe and the decode step (verify_step at 1 token), run for real on CPU."""

from __future__ import annotations

import pytest

from app.protocol.recipes import RecipeError
from runners.recipes import build_launch
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
    assert tags["timer"] == "perf_counter" and tags["sample_count"] == 4 and tags["calls_per_sample"] == 3
    assert tags["min_ms"] <= tags["p10_ms"] <= draft["value"] <= tags["p90_ms"] <= tags["max_ms"]
    assert (tags["batch"], tags["tokens"], tags["context"]) == (1, 1, 16) and len(draft["samples"]) == 4
    assert "draft step (eager, cpu, TP 1, hidden 64, vocab 500, draft vocab 32000, batch 1, context 16" in done.stdout


def test_draft_step_sweeps_batches_each_over_its_own_cache():
    spec = build_launch({"kind": "draft_step", "params": {**SMALL, "batches": [1, 3, 8]}})
    assert "--batches=1,3,8" in spec.argv
    done = run_spec(spec)
    assert done.returncode == 0, done.stderr
    found = by_name(metrics(done.stdout), "draft_step_ms")
    assert [(m["tags"]["batch"], m["tags"]["context"]) for m in found] == [(1, 16), (3, 16), (8, 16)]
    for m in found:
        assert len(m["samples"]) == 4 and sorted(m["samples"])[1] <= m["value"] <= sorted(m["samples"])[2]


def test_the_draft_head_keeps_one_cache_per_sequence():
    torch = pytest.importorskip("torch")
    from runners.recipes._params import validate
    from runners.recipes.draft_step import SPEC, DraftHead

    values = validate({**SMALL, "vocab_size": 50}, SPEC)
    head = DraftHead(values, torch.device("cpu"), torch.float32, max_batch=3)
    assert head.k_cache.shape == (3, 4, 17, 16)  # 3 sequences, 4 heads, 16 positions + this step's, head dim 16
    head.features[:] = head.features[0]  # the same target features and token in every sequence
    head.step(3)
    # this step's key went into each sequence's own next position; the caches before it differ
    assert torch.allclose(head.k_cache[0, :, 16], head.k_cache[2, :, 16])
    assert not torch.allclose(head.k_cache[0, :, :16], head.k_cache[2, :, :16])


def test_draft_step_defaults_to_the_kimi_geometry_and_refuses_what_cannot_run():
    spec = build_launch({"kind": "draft_step", "params": {}})
    assert "--hidden-size=7168" in spec.argv and "--vocab-size=163840" in spec.argv
    for params, message in (
        ({"device": "cpu", "mode": "graph"}, "params.mode (--mode)"),
        ({"hidden_size": 100, "heads": 3}, "params.heads (--heads)"),
        ({"vocab": 10}, "params.vocab: unknown parameter"),
        ({"tokens": 2, "batches": [1, 2]}, "params.tokens (--tokens): give tokens (one point) or batches"),
        ({"batches": [0]}, "params.batches (--batches)"),
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
                "context": 8,
                "heads": 2,
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
    assert decode["samples"] == verify["samples"] and len(decode["samples"]) == 3
    assert decode["tags"]["tokens"] == 1 and decode["tags"]["backend"] == "gloo"
    assert (decode["tags"]["batch"], decode["tags"]["draft_tokens"], decode["tags"]["context"]) == (1, 0, 8)
    assert decode["tags"]["method"] == "nccl-tests" and decode["tags"]["calls_per_sample"] == 2
    for metric in found:
        assert metric["tags"]["device"] == "cpu" and metric["tags"]["scaled"] is True, metric["name"]
    assert "decode step (batch 1, gloo, eager)" in done.stdout


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
        "--context",
        "4",
        "--heads",
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


def test_draft_step_under_the_targets_tensor_parallelism_shards_the_draft_vocab_and_gathers_it():
    spec = build_launch(
        {"kind": "draft_step", "params": {**SMALL, "world_size": 2, "draft_vocab": 200, "batches": [1, 4]}}
    )
    assert "--world-size=2" in spec.argv and "--draft-vocab=200" in spec.argv
    done = run_spec(spec, timeout=180)
    assert done.returncode == 0, done.stderr
    found = by_name(metrics(done.stdout), "draft_step_ms")  # rank 0 reports, once per batch
    assert [m["tags"]["batch"] for m in found] == [1, 4]
    for m in found:
        tags = m["tags"]
        assert tags["world_size"] == 2 and tags["draft_vocab"] == 200 and tags["collectives"] == 3
        assert tags["vocab_size"] == 500 and len(m["samples"]) == 4
    assert "draft step (eager, cpu, TP 2, hidden 64, vocab 500, draft vocab 200, batch 4" in done.stdout


def test_the_tensor_parallel_shares_must_divide():
    with pytest.raises(RecipeError) as exc:
        build_launch({"kind": "draft_step", "params": {**SMALL, "world_size": 3}})
    assert "params.heads (--heads): 4 is not divisible by world size 3" in str(exc.value)
