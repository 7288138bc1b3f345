"""The MoE stand-in (moe_step), run for real on gloo at a tiny geometry: its float32 check, its tags, routing
that touches more experts as the step carries more tokens, tensor and expert parallelism, and the refusals."""

from __future__ import annotations

import pytest

from app.protocol.metrics import ConditionTag as C
from app.protocol.recipes import RecipeError
from runners.recipes import build_launch
from tests.support.recipes import by_name, metrics, run_spec

# 4 layers (1 dense + 3 MoE, 2 of them timed) of 16 experts, top-2, over a 16-position MLA-like cache.
TINY = {
    "backend": "gloo",
    "geometry": "custom",
    "hidden_size": 64,
    "layers": 4,
    "first_k_dense": 1,
    "dense_ffn_size": 128,
    "experts": 16,
    "experts_top_k": 2,
    "moe_ffn_size": 32,
    "vocab_size": 256,
    "heads": 4,
    "kv_lora_rank": 8,
    "kv_rope_dim": 4,
    "context": 16,
    "dtype": "fp32",
    "warmup": 1,
    "iters": 3,
    "calls": 1,
}


def test_world_size_one_checks_then_times_decode_and_verify_with_the_moe_tags():
    spec = build_launch(
        {"kind": "moe_step", "params": {**TINY, "world_size": 1, "batches": [1, 4], "draft_tokens": [0, 3]}}
    )
    done = run_spec(spec, timeout=240)
    assert done.returncode == 0, done.stderr
    assert "correctness ok vs unsharded float32 reference at batch 1, 0 draft tokens" in done.stdout
    assert "MoE stand-in, custom geometry, bf16 experts, 3 of 4 layers timed and scaled" in done.stdout
    found = metrics(done.stdout)
    verify = by_name(found, "verify_time_ms")
    assert [(m["tags"]["batch"], m["tags"]["draft_tokens"]) for m in verify] == [(1, 0), (1, 3), (4, 0), (4, 3)]
    tags = verify[0]["tags"]
    assert tags[C.STANDIN] == "moe" and tags[C.GEOMETRY] == "custom" and tags[C.EXPERTS] == 16
    assert tags[C.EXPERTS_TOP_K] == 2 and tags[C.EXPERTS_DTYPE] == "bf16"
    assert tags[C.LAYERS] == 4 and tags[C.LAYERS_TIMED] == 3 and tags["scaled"] is True
    assert tags["standin_label"] == "MoE stand-in, custom geometry, bf16 experts, 3 of 4 layers timed and scaled"
    assert tags["world_size"] == 1 and tags["allreduces"] == 0 and len(verify[0]["samples"]) == 3
    # decode at k = 0 only, under the dense recipe's name, so the answer reads MoE points like dense ones
    assert [(m["tags"]["batch"], m["tags"]["tokens"]) for m in by_name(found, "decode_step_ms")] == [(1, 1), (4, 4)]
    touched = {(m["tags"]["batch"], m["tags"]["draft_tokens"]): m["tags"][C.EXPERTS_TOUCHED] for m in verify}
    # top-2 of 16: one token reads 2 experts per layer; more tokens read more, never more than 16
    assert touched[(1, 0)] == 2
    assert touched[(1, 0)] < touched[(1, 3)] <= touched[(4, 3)] <= 16
    assert touched[(1, 3)] == pytest.approx(touched[(4, 0)], abs=4)  # 4 tokens either way
    # the independent check of every point: bytes over the copy bandwidth measured in the same run
    (bw,) = by_name(found, "copy_bandwidth_gbps")
    assert bw["value"] > 0
    floors = by_name(found, "step_floor_ms")
    effs = by_name(found, "step_bw_efficiency")
    assert len(floors) == len(effs) == 4
    for floor, eff, v in zip(floors, effs, verify):
        assert floor["tags"]["read_bytes"] > 0
        assert floor["value"] == pytest.approx(floor["tags"]["read_bytes"] / (bw["value"] * 1e9) * 1e3)
        assert eff["value"] == pytest.approx(floor["value"] / v["value"])
    reads = [f["tags"]["read_bytes"] for f in floors]
    assert reads[0] < reads[1] and reads[2] < reads[3]  # verify reads the experts its extra tokens chose


@pytest.mark.parametrize("expert_parallel", [False, True])
def test_two_ranks_match_the_unsharded_reference_with_tensor_or_expert_parallel_experts(expert_parallel):
    params = {**TINY, "world_size": 2, "dtype": "bf16", "batches": [2], "draft_tokens": [1]}
    spec = build_launch({"kind": "moe_step", "params": {**params, "expert_parallel": expert_parallel}})
    done = run_spec(spec, timeout=240)
    assert done.returncode == 0, done.stderr
    assert "correctness ok vs unsharded float32 reference" in done.stdout
    found = metrics(done.stdout)
    (verify,) = by_name(found, "verify_time_ms")
    assert verify["tags"]["allreduces"] == 8 and verify["tags"]["expert_parallel"] is expert_parallel
    assert {m["name"] for m in found} >= {"verify_compute_ms", "verify_comm_ms", "allreduce_in_situ_us"}
    # expert parallel: each rank reads about half of the touched experts, whole
    rank_share = verify["tags"]["experts_touched_rank"] / verify["tags"][C.EXPERTS_TOUCHED]
    assert (rank_share < 1) if expert_parallel else (rank_share == 1)


def test_the_reference_notices_a_wrong_expert():
    torch = pytest.importorskip("torch")
    from runners.recipes._params import validate as coerce
    from runners.recipes.moe_step import SPEC, make_plan, reference, validate

    values = validate({**TINY, "world_size": 1})
    assert coerce({**TINY, "world_size": 1}, SPEC)["experts"] == 16
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(0))
    topk = torch.tensor([[0, 1], [2, 3], [4, 5]])
    plans = [make_plan(topk, list(range(16)), 1, x.device) for _ in range(2)]
    assert plans[0].touched == 6 and [e for e, _, _ in plans[0].experts] == [0, 1, 2, 3, 4, 5]
    ref = reference(values, 1, x, 3, plans)
    other = [make_plan(torch.tensor([[0, 1], [2, 3], [4, 6]]), list(range(16)), 1, x.device)] + plans[1:]
    moved = reference(values, 1, x, 3, other)
    assert ref.shape == (3, 256)
    assert torch.allclose(ref[:2], moved[:2], atol=1e-5) and not torch.allclose(ref[2], moved[2], atol=1e-3)


def test_presets_and_overrides_name_their_geometry():
    from runners.recipes.moe_step import geometry_of

    kimi = validate_ok({})
    assert geometry_of(kimi) == ("kimi-k2.5", geometry_of(kimi)[1])
    geo = geometry_of(kimi)[1]
    assert (geo["experts"], geo["first_k_dense"], geo["moe_ffn_size"], geo["vocab_size"]) == (384, 1, 2048, 163840)
    name, geo = geometry_of(validate_ok({"geometry": "deepseek-v3"}))
    assert name == "deepseek-v3" and (geo["experts"], geo["first_k_dense"]) == (256, 3)
    name, geo = geometry_of(validate_ok({"experts": 128}))
    assert name == "custom" and geo["experts"] == 128 and geo["hidden_size"] == 7168


def validate_ok(params):
    from runners.recipes.moe_step import validate

    return validate({"backend": "nccl", **params})


@pytest.mark.parametrize(
    "params, message",
    [
        ({"experts_dtype": "fp8"}, "params.experts_dtype (--experts-dtype): fp8 experts need a CUDA GPU"),
        (
            {"experts_dtype": "int4"},
            "int4 experts need a CUDA GPU (a Triton W4A16 kernel or torch._weight_int4pack_mm)",
        ),
        ({"tokens": 4, "draft_tokens": [1]}, "params.tokens (--tokens): give tokens"),
        ({"world_size": 3}, "params.hidden_size (--hidden-size): 64 is not divisible by world size 3"),
        ({"experts_top_k": 32}, "params.experts_top_k (--experts-top-k): 32 is more than 16 experts"),
        ({"moe_layers_timed": 4}, "params.moe_layers_timed (--moe-layers-timed): more than the 3 MoE layers"),
        ({"first_k_dense": 4}, "params.first_k_dense (--first-k-dense): 4 leaves no MoE layer"),
        ({"geometry": "llama"}, "params.geometry (--geometry)"),
    ],
)
def test_what_cannot_run_is_refused_naming_the_parameter(params, message):
    with pytest.raises(RecipeError) as exc:
        build_launch({"kind": "moe_step", "params": {**TINY, **params}})
    assert message in str(exc.value)


def test_expert_parallel_needs_experts_divisible_by_the_world():
    with pytest.raises(RecipeError) as exc:
        build_launch({"kind": "moe_step", "params": {**TINY, "experts": 15, "world_size": 2, "expert_parallel": True}})
    assert "params.experts (--experts): 15 is not divisible by world size 2" in str(exc.value)


@pytest.mark.parametrize("tokens", [1, 4, 16, 64, 128, 256, 512, 1024])
def test_balanced_routing_touches_the_experts_a_balanced_router_does(tokens):
    """Each token's top-8 of 384 drawn uniformly without replacement: the distinct experts per layer average
    384 x (1 - (1 - 8/384)^T) over seeds, each token's 8 experts distinct; the random router touches fewer."""
    torch = pytest.importorskip("torch")
    from runners.recipes.moe_step import balanced_topk, expected_touched, make_plan, route

    want = expected_touched(384, 8, tokens)
    touched = []
    for seed in range(16):
        topk = balanced_topk(tokens, 384, 8, seed)
        assert all(len(set(row)) == 8 for row in topk.tolist())
        touched.append(make_plan(topk, list(range(384)), 1, "cpu").touched)
    # one draw of 4 tokens can collide (28 of 31); the mean is the expectation's (the sweep's rows: each within 5%)
    assert abs(sum(touched) / len(touched) / want - 1) <= 0.02, (touched, want)
    assert all(abs(t / want - 1) <= 0.1 for t in touched), (touched, want)
    if tokens in (16, 64):  # the option kept: the stand-in's random-weight router (Kimi's) touches fewer: skewed
        torch = pytest.importorskip("torch")
        from runners.recipes.moe_step import GEOMETRIES, route, router_weights

        w, bias = router_weights(0, 1, GEOMETRIES["kimi-k2.5"], torch.device("cpu"))
        h = torch.randn(tokens, 7168, generator=torch.Generator().manual_seed(1))
        _, topk = route(h, w, bias, 8, 2.827)
        assert make_plan(topk, list(range(384)), 1, "cpu").touched < 0.9 * want


def test_the_router_option_and_the_loop_kernel_are_named_and_still_check():
    spec = build_launch(
        {
            "kind": "moe_step",
            "params": {
                **TINY,
                "world_size": 1,
                "batches": [2],
                "draft_tokens": [1],
                "routing": "router",
                "experts_kernel": "loop",
            },
        }
    )
    done = run_spec(spec, timeout=240)
    assert done.returncode == 0, done.stderr
    assert "correctness ok" in done.stdout
    (verify,) = by_name(metrics(done.stdout), "verify_time_ms")
    assert verify["tags"]["routing"] == "router" and verify["tags"]["experts_kernel"] == "loop"
    assert verify["tags"]["standin_label"].endswith("loop experts' kernel, router routing")


def test_the_grouped_plan_sorts_rows_by_expert_and_pads_groups():
    torch = pytest.importorskip("torch")
    from runners.recipes.moe_step import make_plan

    topk = torch.tensor([[0, 2], [2, 3], [0, 3]])
    plan = make_plan(topk, [0, 1, 2, 3], 1, "cpu", grouped=True)
    assert plan.offs.tolist() == [2, 2, 4, 6]  # expert 1 is an empty group
    assert plan.rows.tolist() == [0, 2, 0, 1, 1, 2] and plan.flat.tolist() == [0, 4, 1, 2, 3, 5]
    padded = make_plan(topk, [0, 1, 2, 3], 4, "cpu", grouped=True)
    assert padded.offs.tolist() == [4, 4, 8, 12] and padded.flat.tolist()[2:4] == [6, 6]  # zero gate at t x k
    experts, rows0, rows = padded.blocks
    assert experts.tolist() == [0, 2, 3] and rows0.tolist() == [0, 4, 8] and rows.tolist() == [4, 4, 4]


def test_int4_group_32_packs_as_the_kernel_reads_it():
    """Symmetric int4 with a scale per 32 weights along K; the kernel's layout (low nibbles the first half of K,
    high the second) multiplies to the dequantized weights' product, expert by expert over sorted rows."""
    torch = pytest.importorskip("torch")
    from runners.recipes import _moe_int4
    from runners.recipes.moe_step import dequantize_int4, quantize_int4

    gen = torch.Generator().manual_seed(3)
    ws = [torch.randn(128, 64, generator=gen) / 11 for _ in range(3)]
    packed, scales, deq = [], [], []
    for w in ws:
        q, s = quantize_int4(w, 32)
        assert q.dtype == torch.uint8 and int(q.max()) <= 15 and s.shape == (4, 64)
        d = dequantize_int4(q, s, 32)
        assert float((d - w).norm() / w.norm()) < 0.15  # 4 bits: about 10% on Gaussian weights
        p, sc = _moe_int4.pack(q, s)
        assert p.shape == (64, 64) and sc.dtype == torch.bfloat16
        packed.append(p)
        scales.append(sc)
        deq.append(d)
    xs = torch.randn(5, 128, generator=gen)
    offs = torch.tensor([2, 2, 5], dtype=torch.int32)
    got = _moe_int4.grouped_reference(xs, torch.stack(packed), torch.stack(scales), offs, 32)
    want = torch.cat([xs[:2] @ deq[0], xs[2:5] @ deq[2]])
    assert torch.allclose(got, want, rtol=1e-2, atol=1e-2)
    assert _moe_int4.fits(7168, 4096, 32) and _moe_int4.fits(2048, 7168, 32) and not _moe_int4.fits(64, 4096, 32)
