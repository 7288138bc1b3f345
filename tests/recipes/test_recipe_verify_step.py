"""The synthetic verify step, run for real on gloo with 2 processes (and 1) at a small geometry."""

from __future__ import annotations

import math

import pytest

from app.protocol.recipes import RecipeError
from runners.recipes import build_launch
from tests.support.recipes import by_name, metrics, run_module, run_spec

# A geometry a 2-core machine runs in seconds: 2 layers, 4 heads over an MLA-like cache of 16 x (8 + 4).
SMALL = {
    "backend": "gloo",
    "hidden_size": 128,
    "ffn_size": 256,
    "layers": 2,
    "heads": 4,
    "kv_lora_rank": 8,
    "kv_rope_dim": 4,
    "context": 16,
    "dtype": "fp32",
    "warmup": 1,
    "iters": 3,
    "calls": 2,
}


def test_gloo_verify_step_reports_comm_share():
    spec = build_launch(
        {
            "kind": "verify_step",
            "params": {
                "backend": "gloo",
                "world_size": 2,
                "hidden_size": 256,
                "ffn_size": 512,
                "layers": 3,
                "tokens": 4,
                "context": 8,
                "heads": 2,
                "warmup": 1,
                "iters": 4,
            },
        }
    )
    done = run_spec(spec)
    assert done.returncode == 0, done.stderr
    assert "correctness ok vs unsharded reference" in done.stdout
    found = {m["name"]: m for m in metrics(done.stdout)}
    for name in (
        "verify_time_ms",
        "verify_compute_ms",
        "verify_comm_ms",
        "verify_comm_isolated_ms",
        "verify_comm_share",
        "allreduce_in_situ_us",
    ):
        assert name in found, name
        assert found[name]["tags"]["allreduces"] == 6 and found[name]["tags"]["world_size"] == 2
    verify, compute, comm = (found[n]["value"] for n in ("verify_time_ms", "verify_compute_ms", "verify_comm_ms"))
    assert verify > 0 and compute > 0 and found["verify_comm_isolated_ms"]["value"] > 0
    assert math.isclose(comm, max(verify - compute, 0.0), rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(found["verify_comm_share"]["value"], comm / verify, rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(found["allreduce_in_situ_us"]["value"], comm * 1000 / 6, rel_tol=1e-9, abs_tol=1e-12)
    assert found["verify_time_ms"]["tags"]["bytes"] == 4 * 256 * 2
    tags = found["verify_time_ms"]["tags"]
    assert (tags["batch"], tags["draft_tokens"], tags["tokens"], tags["context"]) == (1, 3, 4, 8)
    assert "per allreduce x 6" in done.stdout


def test_a_sweep_is_one_row_per_point_with_its_samples():
    spec = build_launch(
        {"kind": "verify_step", "params": {**SMALL, "world_size": 2, "batches": [1, 3], "draft_tokens": [0, 2]}}
    )
    assert "--batches=1,3" in spec.argv and "--draft-tokens=0,2" in spec.argv
    done = run_spec(spec)
    assert done.returncode == 0, done.stderr
    found = metrics(done.stdout)
    verify = by_name(found, "verify_time_ms")
    points = [(m["tags"]["batch"], m["tags"]["draft_tokens"]) for m in verify]
    assert points == [(1, 0), (1, 2), (3, 0), (3, 2)]
    for m in verify + by_name(found, "verify_compute_ms"):
        b, k = m["tags"]["batch"], m["tags"]["draft_tokens"]
        assert m["tags"]["tokens"] == b * (k + 1) and m["tags"]["context"] == 16
        assert m["tags"]["bytes"] == b * (k + 1) * 128 * 4
        assert m["tags"]["kv_bytes"] == b * 16 * 12 * 4 * 2  # b x context x (lora + rope) x fp32 x layers
        # the headline carries its R samples, and its value is their median
        assert len(m["samples"]) == 3 and m["tags"]["sample_count"] == 3
        assert sorted(m["samples"])[1] == pytest.approx(m["value"])
    decode = by_name(found, "decode_step_ms")
    assert [(m["tags"]["batch"], m["tags"]["tokens"], m["tags"]["draft_tokens"]) for m in decode] == [
        (1, 1, 0),
        (3, 3, 0),
    ]
    assert all(len(m["samples"]) == 3 for m in decode)
    assert len(by_name(found, "verify_comm_ms")) == 4 and len(by_name(found, "allreduce_in_situ_us")) == 4
    isolated = by_name(found, "allreduce_isolated_us")
    assert all(len(m["samples"]) == 3 for m in isolated)
    assert "decode step (batch 3, gloo, eager)" in done.stdout


def test_world_size_one_runs_without_an_allreduce_and_emits_no_comm_figure():
    spec = build_launch(
        {"kind": "verify_step", "params": {**SMALL, "world_size": 1, "batches": [2], "draft_tokens": [0, 1]}}
    )
    done = run_spec(spec)
    assert done.returncode == 0, done.stderr
    assert "correctness ok vs unsharded reference at batch 2, 0 draft tokens" in done.stdout
    found = metrics(done.stdout)
    assert {m["name"] for m in found} == {"verify_time_ms", "verify_compute_ms", "decode_step_ms"}
    for verify, compute in zip(by_name(found, "verify_time_ms"), by_name(found, "verify_compute_ms")):
        assert verify["samples"] == compute["samples"] and verify["tags"]["world_size"] == 1
        assert verify["tags"]["allreduces"] == 0
    assert "world size 1: no allreduce" in done.stdout


def test_each_sequence_reads_its_own_cache():
    torch = pytest.importorskip("torch")
    from runners.recipes.verify_step import _cache_read

    gen = torch.Generator().manual_seed(1)
    w = {"w_q": torch.randn(16, 12, generator=gen), "w_kv": torch.randn(8, 16, generator=gen)}
    h = torch.randn(2, 16, generator=gen).repeat(2, 1)  # 2 sequences x 2 tokens, the same tokens in both
    same = torch.randn(1, 5, 12, generator=gen).repeat(2, 1, 1)
    out = _cache_read(h, w, same, heads=3, lora=8)
    assert out.shape == (4, 16) and torch.allclose(out[:2], out[2:])
    own = torch.randn(2, 5, 12, generator=gen)
    out = _cache_read(h, w, own, heads=3, lora=8)
    assert not torch.allclose(out[:2], out[2:])  # the second sequence attends over its own cache
    assert torch.allclose(_cache_read(h[:2], w, own[:1], heads=3, lora=8), out[:2], atol=1e-6)


@pytest.mark.parametrize(
    "params, message",
    [
        ({"tokens": 4, "draft_tokens": [1]}, "params.tokens (--tokens): give tokens"),
        ({"world_size": 0}, "params.world_size (--world-size)"),
        ({"batches": [0]}, "params.batches (--batches)"),
        ({"draft_tokens": [-1]}, "params.draft_tokens (--draft-tokens)"),
        ({"world_size": 2, "heads": 3}, "params.heads (--heads): 3 is not divisible by world size 2"),
        ({"clock": "tsc"}, "params.clock (--clock)"),
    ],
)
def test_bad_sweeps_are_refused_naming_the_parameter(params, message):
    with pytest.raises(RecipeError) as exc:
        build_launch({"kind": "verify_step", "params": params})
    assert message in str(exc.value)


def test_indivisible_geometry_is_refused_before_launch():
    done = run_module("runners.recipes.verify_step", "--world-size", "3", "--hidden-size", "256", timeout=60)
    assert done.returncode == 2 and "not divisible by world size 3" in done.stderr
