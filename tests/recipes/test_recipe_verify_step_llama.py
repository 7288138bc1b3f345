"""The Llama geometry of the verify_step stand-in (issue 42): grouped-query attention, SwiGLU MLP, RMSNorm and the
LM head at the tiny engine model's geometry (hidden 128, 2 layers, MLP 256, 4 heads, 2 KV heads, vocab 2,048),
run for real on this CPU, checked against its float32 reference (sharded at world size 2) and its attention
against a naive per-head loop."""

from __future__ import annotations

import pytest

from app.db import session_scope
from app.domain.answer.prediction import STANDIN, STANDIN_OVERHEAD, engine_check
from app.protocol.recipes import RecipeError
from app.state import app_state
from runners.recipes import build_launch
from tests.support.engine_check import EngineCheckBuilder
from tests.support.recipes import by_name, metrics, run_spec

TINY = {
    "geometry": "llama",
    "backend": "gloo",
    "hidden_size": 128,
    "ffn_size": 256,
    "layers": 2,
    "heads": 4,
    "kv_heads": 2,
    "vocab": 2048,
    "context": 16,
    "warmup": 1,
    "iters": 3,
    "calls": 2,
}


def test_the_llama_geometry_measures_decode_and_verify_on_cpu_tagged_as_its_conditions():
    spec = build_launch(
        {
            "kind": "verify_step",
            "params": {**TINY, "world_size": 1, "dtype": "fp32", "batches": [1, 4], "draft_tokens": [0, 3]},
        }
    )
    done = run_spec(spec)
    assert done.returncode == 0, done.stderr
    assert "correctness ok vs unsharded reference at batch 1, 0 draft tokens" in done.stdout
    found = metrics(done.stdout)
    decode = {m["tags"]["batch"]: m for m in by_name(found, "decode_step_ms")}
    assert sorted(decode) == [1, 4] and decode[4]["tags"]["tokens"] == 4
    verify = {(m["tags"]["batch"], m["tags"]["draft_tokens"]): m for m in by_name(found, "verify_compute_ms")}
    assert verify[(4, 3)]["tags"]["tokens"] == 16 and verify[(4, 3)]["value"] > 0
    tags = verify[(4, 3)]["tags"]
    assert (tags["geometry"], tags["standin"], tags["kv_heads"], tags["vocab"], tags["head_dim"]) == (
        "llama",
        "dense",
        2,
        2048,
        32,
    )
    assert (tags["hidden_size"], tags["ffn_size"], tags["layers"], tags["heads"]) == (128, 256, 2, 4)
    assert tags["scaled"] is False and tags["device"] == "cpu" and tags["dtype"] == "fp32"
    assert tags["kv_bytes"] == 4 * 16 * (2 * 2 * 32) * 4 * 2  # b x context x K and V values x fp32 x layers
    assert "Llama stand-in: grouped-query attention (4 heads, 2 KV heads)" in tags["standin_label"]


def test_the_sharded_llama_step_matches_its_unsharded_float32_reference():
    spec = build_launch(
        {
            "kind": "verify_step",
            "params": {**TINY, "world_size": 2, "dtype": "bf16", "batches": [2], "draft_tokens": [3]},
        }
    )
    done = run_spec(spec)
    assert done.returncode == 0, done.stderr
    assert "correctness ok vs unsharded reference at batch 2, 3 draft tokens" in done.stdout
    found = metrics(done.stdout)
    assert by_name(found, "verify_comm_ms")[0]["tags"]["allreduces"] == 4


def test_grouped_query_attention_matches_a_naive_per_head_loop():
    torch = pytest.importorskip("torch")
    from runners.recipes.verify_step import _causal_mask, _gqa, _rope_table, _rotate

    gen = torch.Generator().manual_seed(3)
    b, per, ctx, heads, kv, hd, hidden = 2, 3, 5, 4, 2, 8, 32
    w = {
        n: torch.randn(hidden, cols, generator=gen) / hidden**0.5
        for n, cols in (("w_q", heads * hd), ("w_k", kv * hd), ("w_v", kv * hd))
    }
    w["w_o"] = torch.eye(heads * hd, hidden)
    cache = (torch.randn(b, kv, ctx, hd, generator=gen), torch.randn(b, kv, ctx, hd, generator=gen))
    h = torch.randn(b * per, hidden, generator=gen)
    rope = _rope_table(ctx, per, hd, torch.float32, "cpu")
    out = _gqa(h, w, cache, b, heads, kv, hd, rope, _causal_mask(ctx, per, "cpu"))

    expect = torch.zeros(b * per, heads * hd)
    for s in range(b):
        x = h[s * per : (s + 1) * per]
        for head in range(heads):
            g = head // (heads // kv)  # the key/value head this query head shares
            q = _rotate((x @ w["w_q"])[:, head * hd : (head + 1) * hd], *rope)
            k_new = _rotate((x @ w["w_k"])[:, g * hd : (g + 1) * hd], *rope)
            v_new = (x @ w["w_v"])[:, g * hd : (g + 1) * hd]
            keys, values = torch.cat([cache[0][s, g], k_new]), torch.cat([cache[1][s, g], v_new])
            for i in range(per):
                seen = ctx + i + 1  # the cache and the sequence's new tokens up to itself
                p = torch.softmax(keys[:seen] @ q[i] / hd**0.5, 0)
                expect[s * per + i, head * hd : (head + 1) * hd] = p @ values[:seen]
    assert torch.allclose(out, expect, atol=1e-5)


@pytest.mark.parametrize(
    "params, message",
    [
        ({"geometry": "llama", "heads": 4, "kv_heads": 3}, "params.kv_heads (--kv-heads): 4 heads are not a multiple"),
        ({"geometry": "llama", "hidden_size": 130, "heads": 4}, "params.heads (--heads): hidden size 130"),
        ({"kv_heads": 2}, "add --geometry llama"),
        ({"geometry": "llama", "world_size": 2, "heads": 4, "kv_heads": 1}, "params.kv_heads (--kv-heads): 1 is not"),
    ],
)
def test_bad_llama_geometries_are_refused_naming_the_parameter(params, message):
    with pytest.raises(RecipeError) as exc:
        build_launch({"kind": "verify_step", "params": params})
    assert message in str(exc.value)


def test_the_recipes_own_lines_pair_with_an_engine_trial_of_that_geometry(app):
    """The stand-in's real metric lines (not hand-written tags) pair with a vllm_server cell at the same batch and
    dtype (the engine's bfloat16 is the recipe's bf16), and the engine's overhead is its spec-off step minus them."""
    params = {**TINY, "kv_heads": 4, "world_size": 1, "dtype": "bf16", "batches": [4], "draft_tokens": [0, 3]}
    done = run_spec(build_launch({"kind": "verify_step", "params": {**params, "context": 160}}))
    assert done.returncode == 0, done.stderr
    lines = [m for m in metrics(done.stdout) if m["name"] in ("decode_step_ms", "verify_compute_ms")]
    with session_scope(app_state(app).engine) as session:
        b = EngineCheckBuilder(session)
        standin = b.trial(b.standin_approach, [(m["name"], m["value"], m["tags"], m["samples"]) for m in lines])
        # an engine step far above any stand-in step on this (shared) machine: the overhead is positive whatever
        # the load, so the test asserts the pairing and the arithmetic, not a timing
        b.engine_trial({(4, 3): (2.5, 1000.0, 1600.0, [1.50, 1.55, 1.60])})
        (cell,) = [c for c in engine_check(session, b.campaign).cells if (c.batch, c.draft_tokens) == (4, 3)]
        assert cell.decode_ms is not None and cell.decode_ms.trials == (standin.id,)
        assert "Llama stand-in" in cell.standin and "context 160" in cell.standin
        assert cell.overhead_ms is not None
        assert cell.overhead_ms.interval.value == pytest.approx(1000.0 - cell.decode_ms.interval.value)
        assert all(p.figure is not None for p in cell.predictions if p.name in (STANDIN, STANDIN_OVERHEAD))
