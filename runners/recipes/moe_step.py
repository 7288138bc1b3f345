"""The MoE stand-in: a tensor-parallel decode / verify step of a mixture-of-experts model (Kimi-K2.5 by default).

    python -m runners.recipes.moe_step --backend gloo --world-size 1 --geometry custom --hidden-size 64 ...
    python -m runners.recipes.moe_step --backend nccl --world-size 1 --mode graph \
        --batches 1,8,64 --draft-tokens 0,3,7 --experts-dtype fp8                    # one H200

A sibling of `verify_step` (the dense stand-in), sharing its MLA cache read, its timing, its variants and
its metric lines. Per layer:
  attention:  h = norm(x); h @ W_in @ W_o + the MLA read over each sequence's own cache (verify_step's
              absorbed-MLA read, heads sharded over the ranks) -> allreduce
  layers < first_k_dense:  a SwiGLU MLP (gate, up, down; 18,432 for Kimi) sharded over the ranks -> allreduce
  MoE layers: a router over the step's hidden states (sigmoid scores plus a correction bias, the chosen
              scores normalized x routed_scaling_factor: DeepSeek-V3's noaux_tc without group limits), the
              shared expert(s), and the routed experts: the step's (token, slot) pairs sorted by expert, one
              grouped GEMM per matrix over every routed expert (gate-up, SwiGLU, down), scaled by the gates and
              summed back per token -> allreduce
and at the end the LM head (each rank its vocab/ws share, the logits all-gathered at world size > 1).

Experts' layout: tensor parallelism (default) gives every rank its moe_intermediate/ws share of every
expert; `--expert-parallel` gives each rank experts/ws whole experts (its tokens are the same on every rank
under TP attention, so each rank runs its own experts over them and the allreduce sums; no all-to-all).
Experts' dtype and kernel (`--experts-kernel grouped`, the default, as engines run them; `loop`: a pair of
matmuls per expert, the earlier stand-in's): bf16 (`torch._grouped_mm`), fp8 (e4m3, a scale per output channel
and per token; `torch._scaled_grouped_mm`, or `torch._scaled_mm` per expert) or int4 (symmetric, a bf16 scale per
`--int4-group` weights along K, 32 as Kimi-K2.5 ships; the Triton W4A16 kernel of `_moe_int4`, or
`torch._weight_int4pack_mm` per expert), each only where the node's torch runs it and matches the dequantized
float32 product (probed).

Routing, seeded: `--routing balanced` (the default) draws each token's top-k experts uniformly without
replacement, as a trained load-balanced router spreads them: the distinct experts per layer follow
experts x (1 - (1 - k/experts)^T) (tag `experts_touched_uniform`); `--routing router` keeps the random-weight
router's own top-k (skewed: fewer experts). The point's tokens (random activations) go through the stack once
eagerly and that plan (which experts, which tokens) is kept; the timed step (eager or in a CUDA graph)
recomputes the router's scores and the gate weights from them every time and runs the kept plan.
Tags carry `experts_touched` (distinct experts routed per MoE layer, the mean over the timed layers).

Only `moe_layers_timed` distinct MoE layers are built (one Kimi MoE layer is 33.8 GB in bf16: 60 do not fit
one GPU); each reads far more than the L2 per step (8 experts = 704 MB). The step is timed in two parts,
the dense layers + LM head and the distinct MoE layers, and each sample is dense + MoE x (MoE layers /
timed); tags `layers` (what the figure stands for), `layers_timed`, `layer_scaling`, `standin_label`.
Checked first, at the smallest point, against a float32 reference of the same timed stack over the same
routing (quantized experts: their dequantized values). Per point also the bytes the step must read
(touched experts, attention and MLP weights, the KV cache, the LM head, at the scaled layer count) over
the copy bandwidth measured at start: a floor and the step's efficiency against it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.protocol.metrics import ConditionTag as C
from app.protocol.metrics import MetricName as M
from app.protocol.metrics import emit
from app.protocol.recipes import RecipeError
from runners.recipes import _dist, _moe_int4, _timing
from runners.recipes import verify_step as dense
from runners.recipes._loading import announce_import
from runners.recipes._params import Param, module_recipe
from runners.recipes._params import validate as _validate

PROG = "runners.recipes.moe_step"

# The presets, from each model's config.json (Kimi-K2.5's text_config; DeepSeek-V3).
GEOMETRIES: dict[str, dict[str, Any]] = {
    "kimi-k2.5": {
        "hidden_size": 7168,
        "layers": 61,
        "first_k_dense": 1,
        "dense_ffn_size": 18432,
        "experts": 384,
        "experts_top_k": 8,
        "moe_ffn_size": 2048,
        "shared_experts": 1,
        "routed_scaling_factor": 2.827,
        "vocab_size": 163840,
        "heads": 64,
        "kv_lora_rank": 512,
        "kv_rope_dim": 64,
    },
    "deepseek-v3": {
        "hidden_size": 7168,
        "layers": 61,
        "first_k_dense": 3,
        "dense_ffn_size": 18432,
        "experts": 256,
        "experts_top_k": 8,
        "moe_ffn_size": 2048,
        "shared_experts": 1,
        "routed_scaling_factor": 2.5,
        "vocab_size": 129280,
        "heads": 128,
        "kv_lora_rank": 512,
        "kv_rope_dim": 64,
    },
}
GEOMETRY_NAMES = {"kimi-k2.5": "Kimi-K2.5", "deepseek-v3": "DeepSeek-V3", "custom": "custom"}
EXPERT_DTYPES = ("bf16", "fp8", "int4")
EXPERT_BYTES = {"bf16": 2.0, "fp8": 1.0, "int4": 0.5}  # the weights; the scales come on top (scale_bytes)
INT4_GROUPS = (32, 64, 128, 256)  # torch._weight_int4pack_mm's; Kimi-K2.5 ships group 32
ROUTINGS = ("balanced", "router")
KERNELS = ("grouped", "loop")
FP8_MAX = 448.0

_OVERRIDES = (
    Param("hidden_size", "int", None, "model hidden size", minimum=1),
    Param("layers", "int", None, "layers the figure stands for (dense + MoE)", minimum=1),
    Param("first_k_dense", "int", None, "leading dense layers (first_k_dense_replace)", minimum=0),
    Param("dense_ffn_size", "int", None, "the dense layers' SwiGLU intermediate size", minimum=1),
    Param("experts", "int", None, "routed experts per MoE layer", minimum=1),
    Param("experts_top_k", "int", None, "experts each token is routed to", minimum=1),
    Param("moe_ffn_size", "int", None, "each expert's SwiGLU intermediate size (moe_intermediate_size)", minimum=1),
    Param("shared_experts", "int", None, "shared experts per MoE layer", minimum=0),
    Param("routed_scaling_factor", "float", None, "scale of the routed experts' sum", minimum=0),
    Param("vocab_size", "int", None, "LM head vocabulary", minimum=1),
    *dense.mla_cache(heads=None, kv_lora_rank=None, kv_rope_dim=None),
)
GEOMETRY_PARAMS = tuple(p.name for p in _OVERRIDES)

SPEC = (
    Param("backend", "choice", "gloo", "allreduce implementation", choices=_dist.BACKENDS),
    Param("mode", "choice", "eager", "eager, or each timed part captured in one CUDA graph", choices=_dist.MODES),
    _dist.WORLD_SIZE,
    Param(
        "geometry",
        "choice",
        "kimi-k2.5",
        "model preset; the overrides below change it (then 'custom')",
        choices=(*GEOMETRIES, "custom"),
    ),
    *_OVERRIDES,
    Param("expert_parallel", "bool", False, "each rank holds experts/ws whole experts (else a TP share of each)"),
    Param("experts_dtype", "choice", "bf16", "routed experts' weights: bf16, fp8 or int4", choices=EXPERT_DTYPES),
    Param(
        "int4_group",
        "int",
        32,
        "int4 experts: weights per bf16 scale along K (symmetric; Kimi-K2.5's compressed-tensors W4A16: 32)",
        minimum=1,
    ),
    Param(
        "experts_kernel",
        "choice",
        "grouped",
        "grouped: one grouped GEMM per matrix over every routed expert (torch._grouped_mm, "
        "torch._scaled_grouped_mm, a Triton W4A16 kernel), as engines run them; loop: a pair of matmuls per expert",
        choices=KERNELS,
    ),
    Param(
        "routing",
        "choice",
        "balanced",
        "balanced: each token's top-k experts drawn uniformly without replacement (seeded), as a trained, "
        "load-balanced router spreads them; router: the random-weight router's own top-k (skewed)",
        choices=ROUTINGS,
    ),
    Param(
        "fp8_scaling",
        "choice",
        "rowwise",
        "fp8 experts: a scale per output channel and per token (rowwise) or one per tensor (tensorwise)",
        choices=("rowwise", "tensorwise"),
    ),
    Param(
        "moe_layers_timed", "int", 2, "distinct MoE layers built and timed (scaled to the MoE layer count)", minimum=1
    ),
    *dense.POINTS,
    Param("dtype", "choice", "bf16", "activations and dense weights", choices=tuple(_dist.DTYPE_BYTES)),
    *_timing.sampling(per="part and variant", seed="weights, activations and so routing"),
    *_dist.TIMEOUTS,
)


def geometry_of(values: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(the geometry's tag, its full parameter values): a preset with no override differing is the preset."""
    base = GEOMETRIES["kimi-k2.5" if values["geometry"] == "custom" else values["geometry"]]
    geo = {name: (base[name] if values.get(name) is None else values[name]) for name in GEOMETRY_PARAMS}
    name = values["geometry"] if geo == base else "custom"
    return name, geo


def points(values: dict[str, Any]) -> list[tuple[int, int]]:
    return dense.points(values)


def validate(params: dict[str, Any]) -> dict[str, Any]:
    """Validated params with the geometry filled in (raises RecipeError naming the parameter)."""
    values = _validate(params, SPEC)
    _dist.static_checks(values, min_world=1)
    dense.check_points(values)
    _, geo = geometry_of(values)
    if geo["first_k_dense"] >= geo["layers"]:
        raise RecipeError(
            f"params.first_k_dense (--first-k-dense): {geo['first_k_dense']} leaves no MoE layer of {geo['layers']}"
        )
    if geo["experts_top_k"] > geo["experts"]:
        raise RecipeError(
            f"params.experts_top_k (--experts-top-k): {geo['experts_top_k']} is more than {geo['experts']} experts"
        )
    if values["moe_layers_timed"] > geo["layers"] - geo["first_k_dense"]:
        raise RecipeError(
            f"params.moe_layers_timed (--moe-layers-timed): more than the "
            f"{geo['layers'] - geo['first_k_dense']} MoE layers"
        )
    if values["experts_dtype"] != "bf16" and values["backend"] == "gloo":
        raise RecipeError(
            f"params.experts_dtype (--experts-dtype): {values['experts_dtype']} experts need a CUDA GPU "
            f"({'torch._scaled_grouped_mm or torch._scaled_mm, SM 8.9 or newer' if values['experts_dtype'] == 'fp8' else 'a Triton W4A16 kernel or torch._weight_int4pack_mm'}"
            "); backend gloo runs on CPU: use bf16"
        )
    if values["int4_group"] not in INT4_GROUPS:
        raise RecipeError(f"params.int4_group (--int4-group): {values['int4_group']} is not one of {INT4_GROUPS}")
    if values["experts_dtype"] == "int4":
        for name in ("hidden_size", "moe_ffn_size"):
            if geo[name] % (2 * values["int4_group"]):
                raise RecipeError(
                    f"params.{name} (--{name.replace('_', '-')}): int4 experts need a multiple of "
                    f"{2 * values['int4_group']} (twice the group)"
                )
    if (
        values["experts_dtype"] == "fp8"
        and values["fp8_scaling"] == "tensorwise"
        and values["experts_kernel"] == "grouped"
    ):
        raise RecipeError(
            "params.fp8_scaling (--fp8-scaling): tensorwise fp8 runs only with --experts-kernel loop "
            "(torch._scaled_grouped_mm takes row-wise scales)"
        )
    ws = values["world_size"]
    if ws is not None:
        problem = _divisible(values, ws)
        if problem:
            raise RecipeError(problem)
    return values


def _sharded(values: dict[str, Any]) -> list[tuple[str, str]]:
    _, geo = geometry_of(values)
    out = [
        ("hidden_size", "hidden size"),
        ("heads", "heads"),
        ("dense_ffn_size", "dense ffn size"),
        ("vocab_size", "vocab size"),
    ]
    out.append(("experts", "experts") if values["expert_parallel"] else ("moe_ffn_size", "moe ffn size"))
    return [(name, label) for name, label in out if geo[name]]


def _divisible(values: dict[str, Any], world: int) -> str | None:
    _, geo = geometry_of(values)
    for name, _label in _sharded(values):
        if geo[name] % world:
            return f"params.{name} (--{name.replace('_', '-')}): {geo[name]} is not divisible by world size {world}"
    return None


RECIPE = module_recipe(PROG, SPEC, validate)


# ---- weights: every rank's shards regenerable by any rank (the reference needs them) ----------------


def _key(*parts: int) -> int:
    h = 1469598103934665603
    for p in parts:
        h = ((h ^ (p + 0x9E3779B9)) * 1099511628211) % (1 << 61)
    return h


def _randn(rows: int, cols: int, fan_in: int, key: int, device):
    """Seeded float32 values of one weight, drawn on the device (the same on every GPU of a kind)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(key)
    return torch.randn(rows, cols, generator=gen, device=device) / fan_in**0.5


# roles
ATTN, MLP, ROUTER, SHARED, EXPERT, HEAD, ROUTING = range(7)


def attn_shard(seed, layer, rank, ws, geo, device):
    hid, lora = geo["hidden_size"], geo["kv_lora_rank"]
    dim = lora + geo["kv_rope_dim"]
    k = _key(seed, ATTN, layer, rank)
    return {
        "w_in": _randn(hid, hid // ws, hid, k + 1, device),
        "w_o": _randn(hid // ws, hid, hid, k + 2, device),
        "w_q": _randn(hid, dim, hid, k + 3, device),
        "w_kv": _randn(lora, hid, lora, k + 4, device),
    }


def swiglu_shard(hidden: int, ffn: int, key: int, device):
    """A SwiGLU MLP's (or one expert's) share: [gate | up] of ffn columns each, and down."""
    return _randn(hidden, 2 * ffn, hidden, key + 1, device), _randn(ffn, hidden, ffn, key + 2, device)


def router_weights(seed, layer, geo, device):
    w = _randn(geo["hidden_size"], geo["experts"], geo["hidden_size"], _key(seed, ROUTER, layer), device)
    bias = _randn(1, geo["experts"], 1, _key(seed, ROUTER, layer, 1), device)[0] * 0.05
    return w, bias


def expert_layout(values, geo, ws: int, rank: int) -> tuple[list[int], int, int]:
    """(this rank's experts, each expert's ffn share here, shards per expert)."""
    if values["expert_parallel"]:
        per = geo["experts"] // ws
        return list(range(rank * per, (rank + 1) * per)), geo["moe_ffn_size"], 1
    return list(range(geo["experts"])), geo["moe_ffn_size"] // ws, ws


def expert_key(seed, layer, shard, expert):
    return _key(seed, EXPERT, layer, shard, expert)


# ---- expert weights in their dtype ------------------------------------------------------------------


def quantize_fp8(w, rowwise: bool = True):
    """[K, N] float32 -> (fp8 [N, K] row-major, so .t() is the column-major operand; scale float32: [1, N]
    per output channel (rowwise), or one for the tensor ([1, 1]; tensorwise))."""
    import torch

    amax = w.abs().amax(0, keepdim=True) if rowwise else w.abs().amax().reshape(1, 1)
    scale = (amax / FP8_MAX).clamp(min=1e-12)
    return (w / scale).to(torch.float8_e4m3fn).t().contiguous(), scale.float()


def dequantize_fp8(q, scale):
    return q.float().t() * scale


def quantize_int4(w, group: int):
    """[K, N] float32 -> (q uint8 [N, K] in 0..15, scale float32 [K/group, N]): symmetric, w ~ (q - 8) x scale,
    one scale per `group` weights along K and per output column (compressed-tensors W4A16, as Kimi-K2.5
    ships its routed experts: group 32, symmetric)."""
    import torch

    k, n = w.shape
    g = w.t().reshape(n, k // group, group)
    scale = (g.abs().amax(-1, keepdim=True) / 7).clamp(min=1e-12)
    q = ((g / scale).round().clamp(-8, 7) + 8).to(torch.uint8).reshape(n, k)
    return q, scale[..., 0].t().contiguous()


def dequantize_int4(q, scale, group: int):
    """(q, scale) of quantize_int4 -> float32 [K, N]."""
    return ((q.float() - 8) * scale.t().repeat_interleave(group, 1)).t().contiguous()


class ExpertBank:
    """One MoE layer's routed experts on this rank, in their dtype and for one kernel: `grouped(xs, plan)` runs
    every routed expert over its rows of xs (sorted by expert) in one grouped GEMM per matrix; `run(e, x)` is
    expert e's SwiGLU alone (the per-expert loop)."""

    def __init__(
        self,
        dtype_name: str,
        act_dtype,
        device,
        count: int,
        hidden: int,
        ffn: int,
        fp8_rowwise: bool = True,
        kernel: str = "grouped",
        group: int = 32,
    ):
        import torch

        self.kind, self.act, self.ffn, self.kernel, self.group = dtype_name, act_dtype, ffn, kernel, group
        self.rowwise, self.count, self.hidden = fp8_rowwise, count, hidden
        self.slot: dict[int, int] = {}
        # stacked tensors per role [count, ...]; int4 with the loop: a list of tinygemm-packed tensors per role
        self.gu: Any
        self.gu_s: Any
        self.down: Any
        self.down_s: Any
        if dtype_name == "bf16":
            self.gu = torch.empty(count, hidden, 2 * ffn, dtype=act_dtype, device=device)
            self.down = torch.empty(count, ffn, hidden, dtype=act_dtype, device=device)
        elif dtype_name == "fp8":
            self.gu = torch.empty(count, 2 * ffn, hidden, dtype=torch.float8_e4m3fn, device=device)
            self.gu_s = torch.empty(count, 1, 2 * ffn if fp8_rowwise else 1, dtype=torch.float32, device=device)
            self.down = torch.empty(count, hidden, ffn, dtype=torch.float8_e4m3fn, device=device)
            self.down_s = torch.empty(count, 1, hidden if fp8_rowwise else 1, dtype=torch.float32, device=device)
        elif kernel == "grouped":  # int4, the Triton kernel's layout (_moe_int4.pack)
            self.gu = torch.empty(count, hidden // 2, 2 * ffn, dtype=torch.uint8, device=device)
            self.gu_s = torch.empty(count, hidden // group, 2 * ffn, dtype=torch.bfloat16, device=device)
            self.down = torch.empty(count, ffn // 2, hidden, dtype=torch.uint8, device=device)
            self.down_s = torch.empty(count, ffn // group, hidden, dtype=torch.bfloat16, device=device)
        else:
            self.gu, self.gu_s, self.down, self.down_s = [], [], [], []  # tinygemm-packed per expert

    def put(self, e: int, gu, down) -> None:
        """Store expert e's float32 weights ([hidden, 2f], [f, hidden]) in this bank's dtype."""
        import torch

        i = self.slot.setdefault(e, len(self.slot))
        if self.kind == "bf16":
            self.gu[i].copy_(gu)
            self.down[i].copy_(down)
        elif self.kind == "fp8":
            q, s = quantize_fp8(gu, self.rowwise)
            self.gu[i].copy_(q)
            self.gu_s[i].copy_(s)
            q, s = quantize_fp8(down, self.rowwise)
            self.down[i].copy_(q)
            self.down_s[i].copy_(s)
        elif self.kernel == "grouped":
            for w, packed, scales in ((gu, self.gu, self.gu_s), (down, self.down, self.down_s)):
                p, s = _moe_int4.pack(*quantize_int4(w, self.group))
                packed[i].copy_(p)
                scales[i].copy_(s)
        else:
            for w, packed, scales in ((gu, self.gu, self.gu_s), (down, self.down, self.down_s)):
                q, scale = quantize_int4(w, self.group)
                packed.append(torch._convert_weight_to_int4pack((q[:, ::2] << 4 | q[:, 1::2]).contiguous(), 8))
                sz = torch.stack([scale, torch.zeros_like(scale)], -1)  # tinygemm: (q - 8) x scale + zero
                scales.append(sz.to(torch.bfloat16).contiguous())

    def dequantized(self, gu, down):
        """What the reference computes with: the float32 weights as this dtype stores them."""
        if self.kind == "fp8":
            return dequantize_fp8(*quantize_fp8(gu, self.rowwise)), dequantize_fp8(*quantize_fp8(down, self.rowwise))
        if self.kind == "int4":
            g = self.group
            (qg, sg), (qd, sd) = quantize_int4(gu, g), quantize_int4(down, g)
            return dequantize_int4(qg, sg, g), dequantize_int4(qd, sd, g)
        return gu, down

    def _quantize_rows(self, x):
        import torch

        amax = x.abs().amax(-1, keepdim=True) if self.rowwise else x.abs().amax()
        sx = (amax.float() / FP8_MAX).clamp(min=1e-12)
        return (x.float() / sx).to(torch.float8_e4m3fn), sx

    def _mm(self, x, which: str, i: int):
        import torch

        if self.kind == "bf16":
            return x @ (self.gu if which == "gu" else self.down)[i]
        if self.kind == "fp8":
            w = (self.gu if which == "gu" else self.down)[i]
            ws = (self.gu_s if which == "gu" else self.down_s)[i]
            xq, sx = self._quantize_rows(x)
            if not self.rowwise:  # tensorwise: one scale each (0-dim), cuBLASLt's fp8 path
                sx, ws = sx.reshape(()), ws.reshape(())
            return torch._scaled_mm(xq, w.t(), scale_a=sx, scale_b=ws, out_dtype=self.act)
        packed = (self.gu if which == "gu" else self.down)[i]
        sz = (self.gu_s if which == "gu" else self.down_s)[i]
        return torch._weight_int4pack_mm(x.to(torch.bfloat16), packed, self.group, sz).to(self.act)

    def run(self, e: int, x):
        import torch.nn.functional as F

        i = self.slot[e]
        gate, up = self._mm(x, "gu", i).chunk(2, dim=-1)
        return self._mm((F.silu(gate) * up).contiguous(), "down", i)

    def _gmm(self, x, which: str, plan: Plan):
        import torch

        w = self.gu if which == "gu" else self.down
        if self.kind == "bf16":
            return torch._grouped_mm(x, w, offs=plan.offs)
        s = self.gu_s if which == "gu" else self.down_s
        if self.kind == "fp8":
            xq, sx = self._quantize_rows(x)
            return torch._scaled_grouped_mm(
                xq, w.transpose(-2, -1), sx.reshape(-1), s.reshape(self.count, -1), offs=plan.offs, out_dtype=self.act
            )
        return _moe_int4.grouped(x.to(torch.bfloat16), w, s, plan.blocks, plan.block_m, self.group).to(self.act)

    def grouped(self, xs, plan: Plan):
        """xs: the plan's rows (sorted by this bank's slots): each routed expert's SwiGLU over its rows."""
        import torch.nn.functional as F

        gate, up = self._gmm(xs, "gu", plan).chunk(2, dim=-1)
        return self._gmm((F.silu(gate) * up).contiguous(), "down", plan)

    def bytes_per_expert(self, hidden: int) -> float:
        """One expert's bytes as stored: the weights and their scales (fp8 rowwise: fp32 per output column;
        int4: bf16 per group, tinygemm's scale and zero with the loop)."""
        weights = 3 * hidden * self.ffn
        scales = 0.0
        if self.kind == "fp8":
            scales = 4 * ((2 * self.ffn + hidden) if self.rowwise else 2)
        elif self.kind == "int4":
            scales = weights / self.group * (2 if self.kernel == "grouped" else 4)
        return weights * EXPERT_BYTES[self.kind] + scales


def probe_experts_dtype(
    kind: str, device, act_dtype, fp8_rowwise: bool = True, kernel: str = "grouped", group: int = 32
) -> str | None:
    """None when this torch and device run `kind` experts with `kernel` and the result matches the dequantized
    float32 product (relative error under 5e-2); else why not (the trial is refused, exit 2)."""
    import torch

    if kind != "bf16" and device.type != "cuda":
        return f"{kind} experts need a CUDA GPU"
    cap = torch.cuda.get_device_capability(device) if device.type == "cuda" else (0, 0)
    if kind == "fp8" and cap < (8, 9):
        return f"fp8 experts need SM 8.9 or newer for torch._scaled_mm; this GPU is SM {cap[0]}.{cap[1]}"
    hidden, ffn, experts = 512, 512, 4
    op = {
        ("bf16", "grouped"): "torch._grouped_mm",
        ("fp8", "grouped"): "torch._scaled_grouped_mm",
        ("int4", "grouped"): "the Triton W4A16 kernel (runners/recipes/_moe_int4.py)",
        ("bf16", "loop"): "torch.matmul",
        ("fp8", "loop"): "torch._scaled_mm",
        ("int4", "loop"): "torch._weight_int4pack_mm",
    }[(kind, kernel)]
    try:
        gen = torch.Generator(device=device).manual_seed(5)
        bank = ExpertBank(kind, act_dtype, device, experts, hidden, ffn, fp8_rowwise, kernel, group)
        weights = []
        for e in range(experts):
            gu = torch.randn(hidden, 2 * ffn, generator=gen, device=device) / hidden**0.5
            down = torch.randn(ffn, hidden, generator=gen, device=device) / ffn**0.5
            bank.put(e, gu, down)
            weights.append(bank.dequantized(gu, down))
        topk = torch.tensor([[0, 2], [2, 3], [0, 3], [3, 2], [0, 2]])
        plan = make_plan(topk, list(range(experts)), 16 if kind == "fp8" else 1, device, kernel == "grouped")
        x = torch.randn(5, hidden, generator=gen, device=device)
        xs = x.to(act_dtype)
        if kernel == "grouped":
            out = bank.grouped(xs.index_select(0, plan.rows), plan).float()
            ends = plan.offs.tolist()
            segments = [(e, plan.rows[a:b]) for e, a, b in zip(range(experts), [0, *ends[:-1]], ends)]
        else:
            segments = [(e, rows) for e, rows, _ in plan.experts]
            out = torch.cat([bank.run(e, xs.index_select(0, rows)).float() for e, rows in segments])
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        ref = []
        for e, rows in segments:
            gu, down = weights[e]
            gate, up = (x.float()[rows] @ gu).chunk(2, dim=-1)
            ref.append((torch.nn.functional.silu(gate) * up) @ down)
        want = torch.cat(ref)
        rel = float((out - want).norm() / want.norm())
        if not bool(torch.isfinite(out).all()) or rel > 5e-2:
            return f"{kind} experts with {op}: the probe's product is off (relative error {rel:.3g})"
    except (RuntimeError, AttributeError, TypeError, NotImplementedError, ImportError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"{kind} experts: {op} does not run on torch {torch.__version__}, SM {cap[0]}.{cap[1]}: {first}"
    return None


# ---- the routing plan -------------------------------------------------------------------------------


@dataclass
class Plan:
    """One MoE layer's routing at one point: the chosen experts per token; `touched` counts all ranks' experts.
    The loop's view: per local touched expert its token rows and their flat (token x k + slot) gate positions.
    The grouped view: every local routed (token, slot) sorted by the bank's expert slots, each expert's rows
    padded to `pad_to`: `rows` (the token of each), `flat` (its gate position; padding: t x k, a zero gate),
    `offs` (int32 cumulative row ends per local expert, the grouped GEMMs' groups) and, for the int4 kernel,
    `blocks` (_moe_int4.block_table as int32 tensors) of `block_m` rows."""

    topk: Any  # [T, k] long, on the device
    experts: list[tuple[int, Any, Any]]  # (expert, rows, flat positions), on the device
    touched: int
    rows: Any = None
    flat: Any = None
    offs: Any = None
    blocks: Any = None
    block_m: int = 16


def make_plan(topk, local: Sequence[int], pad_to: int, device, grouped: bool = False) -> Plan:
    """local: this rank's experts in its bank's slot order."""
    import torch

    t, k = topk.shape
    flat = topk.reshape(-1).cpu()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=max(int(flat.max()) + 1, max(local, default=0) + 1))
    starts = torch.cumsum(counts, 0) - counts
    experts = []
    per_slot: list[tuple[Any, Any]] = []
    touched = int((counts > 0).sum())
    empty = torch.zeros(0, dtype=torch.long)
    for e in local:
        if not counts[e]:
            per_slot.append((empty, empty))
            continue
        pos = order[starts[e] : starts[e] + counts[e]]
        rows = pos // k
        if pad_to > 1 and len(pos) % pad_to:
            extra = pad_to - len(pos) % pad_to  # padded rows: token 0 with a zero gate (flat index t*k)
            rows = torch.cat([rows, torch.zeros(extra, dtype=rows.dtype)])
            pos = torch.cat([pos, torch.full((extra,), t * k, dtype=pos.dtype)])
        per_slot.append((rows, pos))
    for e, (rows, pos) in zip(local, per_slot):
        if len(rows):
            experts.append((e, rows.to(device), pos.to(device)))
    experts.sort(key=lambda item: item[0])
    plan = Plan(topk, experts, touched)
    if grouped:
        sizes = [len(rows) for rows, _ in per_slot]
        ends = torch.cumsum(torch.tensor(sizes, dtype=torch.long), 0)
        plan.rows = torch.cat([r for r, _ in per_slot]).to(device) if per_slot else empty.to(device)
        plan.flat = torch.cat([p for _, p in per_slot]).to(device) if per_slot else empty.to(device)
        plan.offs = ends.to(torch.int32).to(device)
        plan.block_m = _moe_int4.block_m_for(sizes)
        starts_l = (ends - torch.tensor(sizes, dtype=torch.long)).tolist()
        table = _moe_int4.block_table(sizes, starts_l, plan.block_m)
        plan.blocks = tuple(torch.tensor(col, dtype=torch.int32).to(device) for col in table)
    return plan


def route(h, w_router, bias, top_k: int, scaling: float):
    """Sigmoid scores; the top-k chosen by score + bias; their scores normalized, x routed_scaling_factor."""
    import torch

    scores = torch.sigmoid((h @ w_router).float())
    topk = torch.topk(scores + bias.float(), top_k, dim=-1).indices
    return scores, topk


def balanced_topk(tokens: int, experts: int, top_k: int, key: int):
    """Each token's top_k experts drawn uniformly without replacement (seeded, on the CPU: the same on every
    rank): what a load-balanced router (DeepSeek-V3's bias correction, noaux_tc) spreads tokens like. The
    expected distinct experts over T tokens: experts x (1 - (1 - top_k/experts)^T) (expected_touched)."""
    import torch

    gen = torch.Generator().manual_seed(key)
    return torch.rand(tokens, experts, generator=gen).topk(top_k, dim=-1).indices


def expected_touched(experts: int, top_k: int, tokens: int) -> float:
    return experts * (1 - (1 - top_k / experts) ** tokens)


def gates(scores, topk, scaling: float, dtype):
    import torch

    w = scores.gather(1, topk)
    w = w / w.sum(-1, keepdim=True) * scaling
    return torch.cat([w.reshape(-1), w.new_zeros(1)]).to(dtype)


# ---- the stack on a rank ----------------------------------------------------------------------------


class Stack:
    """This rank's timed layers: the dense ones, `moe_layers_timed` distinct MoE layers, the LM head."""

    def __init__(self, values, rank: _dist.Rank, dtype, max_batch: int):
        import torch

        self.values, self.rank = values, rank
        self.geo_name, self.geo = geometry_of(values)
        geo, ws, r, seed, dev = self.geo, rank.world_size, rank.rank, values["seed"], rank.device
        self.dtype, self.ws = dtype, ws
        self.heads, self.lora = geo["heads"] // ws, geo["kv_lora_rank"]
        self.dim = self.lora + geo["kv_rope_dim"]
        self.fkd, self.n_moe = geo["first_k_dense"], values["moe_layers_timed"]
        self.moe_layers = geo["layers"] - self.fkd
        self.local, self.f_local, self.shards = expert_layout(values, geo, ws, r)
        self.pad = 16 if values["experts_dtype"] == "fp8" else 1
        self.kernel, self.routing = values["experts_kernel"], values["routing"]
        hid = geo["hidden_size"]
        timed = self.fkd + self.n_moe
        self.attn = [{k: v.to(dtype) for k, v in attn_shard(seed, i, r, ws, geo, dev).items()} for i in range(timed)]
        self.mlp = [
            tuple(w.to(dtype) for w in swiglu_shard(hid, geo["dense_ffn_size"] // ws, _key(seed, MLP, i, r), dev))
            for i in range(self.fkd)
        ]
        self.router: list[Any] = []
        self.shared: list[Any] = []
        self.banks: list[ExpertBank] = []
        for i in range(self.fkd, timed):
            w, b = router_weights(seed, i, geo, dev)
            self.router.append((w.to(dtype), b))
            sf = geo["shared_experts"] * geo["moe_ffn_size"] // ws
            self.shared.append(
                tuple(w.to(dtype) for w in swiglu_shard(hid, sf, _key(seed, SHARED, i, r), dev)) if sf else None
            )
            bank = ExpertBank(
                values["experts_dtype"],
                dtype,
                dev,
                len(self.local),
                hid,
                self.f_local,
                values["fp8_scaling"] == "rowwise",
                self.kernel,
                values["int4_group"],
            )
            shard = r if self.shards > 1 else 0
            for e in self.local:
                bank.put(e, *swiglu_shard(hid, self.f_local, expert_key(seed, i, shard, e), dev))
            self.banks.append(bank)
        self.head = _randn(hid, geo["vocab_size"] // ws, hid, _key(seed, HEAD, r), dev).to(dtype)
        ctx = values["context"]
        self.caches: list[Any] = [
            dense._kv_cache(seed, i, max_batch, ctx, self.dim, dtype, dev) if ctx else None for i in range(timed)
        ]
        if rank.on_gpu:
            torch.cuda.synchronize(dev)

    def attention(self, i: int, x, b: int, allreduce):
        h = dense._norm(x)
        w = self.attn[i]
        a = h @ w["w_in"] @ w["w_o"]
        cache = self.caches[i]
        if cache is not None:
            a = a + dense._cache_read(h, w, cache[:b], self.heads, self.lora)
        return x + allreduce(a)

    def dense_layer(self, i: int, x, b: int, allreduce):
        import torch.nn.functional as F

        x = self.attention(i, x, b, allreduce)
        gu, down = self.mlp[i]
        gate, up = (dense._norm(x) @ gu).chunk(2, dim=-1)
        return x + allreduce((F.silu(gate) * up) @ down)

    def moe_layer(self, j: int, x, b: int, allreduce, plans: list, record: bool):
        """MoE layer j (0-based among the timed ones). record: route here and append the plan to `plans`;
        else run plans[j] (the router and gates are still computed)."""
        import torch.nn.functional as F

        i = self.fkd + j
        x = self.attention(i, x, b, allreduce)
        h = dense._norm(x)
        w_router, bias = self.router[j]
        scores, topk = route(h, w_router, bias, self.geo["experts_top_k"], self.geo["routed_scaling_factor"])
        if record:
            if self.routing == "balanced":
                key = _key(self.values["seed"], ROUTING, i, b, h.shape[0])
                topk = balanced_topk(h.shape[0], self.geo["experts"], self.geo["experts_top_k"], key).to(h.device)
            plans.append(make_plan(topk, self.local, self.pad, h.device, self.kernel == "grouped"))
        plan = plans[j]
        g = gates(scores, plan.topk, self.geo["routed_scaling_factor"], h.dtype)
        shared = self.shared[j]
        if shared is not None:
            gu, down = shared
            gate, up = (h @ gu).chunk(2, dim=-1)
            out = (F.silu(gate) * up) @ down
        else:
            out = h.new_zeros(h.shape)
        bank = self.banks[j]
        if self.kernel == "grouped":
            if plan.rows.numel():  # one grouped GEMM per matrix over every routed expert, then the combine
                y = bank.grouped(h.index_select(0, plan.rows), plan) * g[plan.flat].unsqueeze(1)
                out.index_add_(0, plan.rows, y)
        else:
            for e, rows, flat in plan.experts:
                y = bank.run(e, h.index_select(0, rows)) * g[flat].unsqueeze(1)
                out.index_add_(0, rows, y)
        return x + allreduce(out)

    def lm_head(self, x, gather):
        return gather(dense._norm(x) @ self.head)


# ---- the float32 reference ------------------------------------------------------------------------


def reference(values, ws: int, x0, b: int, plans: list[Plan]):
    """The timed stack unsharded in float32 on x0's device, over the step's routing (its top-k per token),
    each weight the sum over every rank's shard, quantized experts as their dequantized values."""
    import torch
    import torch.nn.functional as F

    _, geo = geometry_of(values)
    seed, dev = values["seed"], x0.device
    heads, lora = geo["heads"] // ws, geo["kv_lora_rank"]
    dim = lora + geo["kv_rope_dim"]
    fkd, hid = geo["first_k_dense"], geo["hidden_size"]
    ctx = values["context"]
    x = x0.float()
    bank = ExpertBank(
        values["experts_dtype"],
        torch.float32,
        dev,
        0,
        hid,
        0,
        values["fp8_scaling"] == "rowwise",
        "loop",
        values["int4_group"],
    )

    def swiglu(h, gu, down):
        gate, up = (h @ gu).chunk(2, dim=-1)
        return (F.silu(gate) * up) @ down

    for i in range(fkd + values["moe_layers_timed"]):
        h = dense._norm(x)
        cache = dense._kv_cache(seed, i, b, ctx, dim, torch.float32, dev) if ctx else None
        a = 0
        for r in range(ws):
            w = attn_shard(seed, i, r, ws, geo, dev)
            a = a + h @ w["w_in"] @ w["w_o"]
            if cache is not None:
                a = a + dense._cache_read(h, w, cache, heads, lora)
        x = x + a
        h = dense._norm(x)
        if i < fkd:
            f = geo["dense_ffn_size"] // ws
            x = x + sum(swiglu(h, *swiglu_shard(hid, f, _key(seed, MLP, i, r), dev)) for r in range(ws))
            continue
        plan = plans[i - fkd]
        w_router, _ = router_weights(seed, i, geo, dev)
        scores = torch.sigmoid(h @ w_router)
        g = scores.gather(1, plan.topk)
        g = g / g.sum(-1, keepdim=True) * geo["routed_scaling_factor"]
        out = torch.zeros_like(h)
        sf = geo["shared_experts"] * geo["moe_ffn_size"] // ws
        if sf:
            out = out + sum(swiglu(h, *swiglu_shard(hid, sf, _key(seed, SHARED, i, r), dev)) for r in range(ws))
        shards = 1 if values["expert_parallel"] else ws
        f = geo["moe_ffn_size"] // shards
        for e in torch.unique(plan.topk).tolist():
            chosen = plan.topk == e  # [T, k]
            rows = chosen.any(-1)
            weight = (g * chosen).sum(-1, keepdim=True)
            y = sum(
                swiglu(h, *bank.dequantized(*swiglu_shard(hid, f, expert_key(seed, i, s, e), dev)))
                for s in range(shards)
            )
            out = out + torch.where(rows.unsqueeze(1), y * weight, torch.zeros_like(y))
        x = x + out
    logits = [dense._norm(x) @ _randn(hid, geo["vocab_size"] // ws, hid, _key(seed, HEAD, r), dev) for r in range(ws)]
    return torch.cat(logits, -1)


# ---- the run --------------------------------------------------------------------------------------


def copy_bandwidth_gbps(rank: _dist.Rank) -> float:
    """Device-to-device copy rate, bytes read + written per second (GB/s): the floor's ceiling."""
    import torch

    n = (2 << 30) if rank.on_gpu else (64 << 20)
    src = torch.empty(n, dtype=torch.uint8, device=rank.device).random_(0, 255)
    dst = torch.empty_like(src)
    timer = _timing.device_timer(rank.device)
    samples = _timing.time_back_to_back(lambda: dst.copy_(src), timer, 5, 5 if rank.on_gpu else 2)
    us = sorted(samples)[len(samples) // 2]
    return 2 * n / (us * 1e-6) / 1e9


def standin_label(geo_name: str, values: dict[str, Any], geo: dict[str, Any]) -> str:
    timed = geo["first_k_dense"] + values["moe_layers_timed"]
    scaling = "timed and scaled" if timed < geo["layers"] else "timed"
    edt = values["experts_dtype"] + (f" (group {values['int4_group']})" if values["experts_dtype"] == "int4" else "")
    extra = "".join(
        f", {what}"
        for what, default in (
            (f"{values['experts_kernel']} experts' kernel", values["experts_kernel"] == "grouped"),
            (f"{values['routing']} routing", values["routing"] == "balanced"),
        )
        if not default
    )
    return (
        f"MoE stand-in, {GEOMETRY_NAMES[geo_name]} geometry, {edt} experts, "
        f"{timed} of {geo['layers']} layers {scaling}{extra}"
    )


def _kernel_refusal(values: dict[str, Any], ws: int) -> str | None:
    """The grouped int4 kernel's tiles must divide the experts' matrices on this rank."""
    if values["experts_dtype"] != "int4" or values["experts_kernel"] != "grouped":
        return None
    _, geo = geometry_of(values)
    f = geo["moe_ffn_size"] if values["expert_parallel"] else geo["moe_ffn_size"] // ws
    hid, g = geo["hidden_size"], values["int4_group"]
    if _moe_int4.fits(hid, 2 * f, g) and _moe_int4.fits(f, hid, g):
        return None
    return (
        f"int4 experts with the grouped kernel need hidden size and the experts' ffn share ({hid}, {f}) "
        "to split into its tiles (K/2 a multiple of 256, N of 128): use --experts-kernel loop"
    )


def _refused(rank: _dist.Rank, values: dict[str, Any]) -> bool:
    """What this world cannot run, said on stderr: indivisible shards, an experts dtype or kernel the node
    does not run right (probed on every rank), symmetric memory across nodes."""
    problem = _divisible(values, rank.world_size)
    if problem:
        print(f"moe_step: {problem}", file=sys.stderr)
        return True
    refusal = probe_experts_dtype(
        values["experts_dtype"],
        rank.device,
        _timing.torch_dtype(values["dtype"]),
        values["fp8_scaling"] == "rowwise",
        values["experts_kernel"],
        values["int4_group"],
    ) or _kernel_refusal(values, rank.world_size)
    if not rank.all_true(refusal is None):
        if rank.rank == 0:
            print(f"moe_step: error: {refusal or 'another rank refused the experts dtype'}", file=sys.stderr)
        return True
    return _dist.refused_across_nodes(rank, PROG)


def _measure(rank: _dist.Rank, values: dict[str, Any]) -> int:
    import torch

    if _refused(rank, values):
        return 2
    dtype = _timing.torch_dtype(values["dtype"])
    sampling = _timing.Sampling.of(values)
    pts = points(values)
    rank.phase("measuring the copy bandwidth")
    bw = copy_bandwidth_gbps(rank)
    _, geo = geometry_of(values)
    rank.phase(f"building {geo['first_k_dense'] + values['moe_layers_timed']} distinct layers")
    stack = Stack(values, rank, dtype, max(b for b, _ in pts))
    gen = torch.Generator().manual_seed(values["seed"] + 17)
    max_tokens = max(b * (k + 1) for b, k in pts)
    x_all = torch.randn(max_tokens, geo["hidden_size"], generator=gen).to(dtype=dtype, device=rank.device)
    tags = _tags(rank, values, sampling, stack, bw)
    _log_start(rank, values, stack, bw, pts)
    if rank.rank == 0:
        emit(M.COPY_BANDWIDTH_GBPS, bw, "GB/s", **tags)
    if not _checked(rank, values, stack, x_all, pts):
        return 1
    rows = []
    for b, k in pts:
        times, touched, local = _time_point(rank, values, sampling, stack, x_all, b, k)
        if rank.rank == 0:
            rows.append(_emit_point(values, stack, tags, times, b, k, touched, local, bw))
    if rank.rank == 0:
        _print_table(rows, tags["standin_label"])
    return 0


def _tags(
    rank: _dist.Rank, values: dict[str, Any], sampling: _timing.Sampling, stack: Stack, bw: float
) -> dict[str, Any]:
    """The conditions every line of the run carries."""
    geo_name, geo = stack.geo_name, stack.geo
    ws = rank.world_size
    defaults = GEOMETRIES["kimi-k2.5" if geo_name == "custom" else geo_name]
    factor = stack.moe_layers / stack.n_moe
    return {
        "backend": rank.backend,
        "mode": values["mode"],
        "world_size": ws,
        "dtype": values["dtype"],
        C.STANDIN: "moe",
        C.GEOMETRY: geo_name,
        C.EXPERTS: geo["experts"],
        C.EXPERTS_TOP_K: geo["experts_top_k"],
        C.EXPERTS_DTYPE: values["experts_dtype"],
        **({"fp8_scaling": values["fp8_scaling"]} if values["experts_dtype"] == "fp8" else {}),
        **({"int4_group": values["int4_group"]} if values["experts_dtype"] == "int4" else {}),
        "experts_kernel": values["experts_kernel"],
        "routing": values["routing"],
        C.LAYERS: geo["layers"],
        C.LAYERS_TIMED: stack.fkd + stack.n_moe,
        "moe_layers_timed": stack.n_moe,
        "layer_scaling": f"{stack.fkd} dense + {stack.n_moe} MoE layers timed; MoE part x {factor:g}",
        "standin_label": standin_label(geo_name, values, geo),
        "hidden_size": geo["hidden_size"],
        "ffn_size": geo["dense_ffn_size"],
        "moe_ffn_size": geo["moe_ffn_size"],
        "first_k_dense": geo["first_k_dense"],
        "shared_experts": geo["shared_experts"],
        "vocab_size": geo["vocab_size"],
        "expert_parallel": values["expert_parallel"],
        "heads": geo["heads"],
        "kv_dim": stack.dim if values["context"] else 0,
        "allreduces": 2 * geo["layers"] if ws > 1 else 0,
        "scaled": any(
            geo[n] < defaults[n]
            for n in ("hidden_size", "dense_ffn_size", "moe_ffn_size", "experts", "vocab_size", "heads")
        ),
        **sampling.tags(rank),
        "copy_bandwidth_gbps": round(bw, 1),
        **_dist.knob_tags(),
        **_dist.stack_tags(rank),
    }


def _log_start(rank: _dist.Rank, values: dict[str, Any], stack: Stack, bw: float, pts: list[tuple[int, int]]) -> None:
    geo = stack.geo
    rank.log(
        f"moe_step: {standin_label(stack.geo_name, values, geo)} (MoE part x {stack.moe_layers / stack.n_moe:g}); "
        f"backend={rank.backend} mode={values['mode']} world_size={rank.world_size} "
        f"experts={geo['experts']} top_k={geo['experts_top_k']} moe_ffn={geo['moe_ffn_size']} "
        f"{'expert' if values['expert_parallel'] else 'tensor'}-parallel experts, context={values['context']}, "
        f"copy bandwidth {bw:.0f} GB/s; {len(pts)} point(s): " + " ".join(f"({b},{k})" for b, k in pts)
    )


def _routed(rank: _dist.Rank, values: dict[str, Any], stack: Stack, x_all, b: int, k: int):
    """The point's routing pass (eager, with the allreduces: every rank routes the same hidden states), then
    its timed parts over static buffers: parts(with_allreduce) = (dense layers + LM head, the MoE layers over
    the routed plans); also the plans and the pass's logits."""
    ws, t = rank.world_size, b * (k + 1)
    inp = x_all[:t]
    ar = _dist.Allreduce(rank, (t, stack.geo["hidden_size"]), values["dtype"]) if ws > 1 else None
    gather_op = _dist.AllGather(rank, (t, stack.geo["vocab_size"] // ws), stack.dtype) if ws > 1 else None
    reduce = _dist.reducer(ar) if ar is not None else dense._same
    gather = gather_op if gather_op is not None else dense._same

    plans: list[Plan] = []
    x = inp
    for i in range(stack.fkd):
        x = stack.dense_layer(i, x, b, reduce)
    moe_in = x.clone()
    for j in range(stack.n_moe):
        x = stack.moe_layer(j, x, b, reduce, plans, record=True)
    logits = stack.lm_head(x, gather)

    def parts(with_allreduce: bool):
        allreduce = reduce if with_allreduce else dense._same
        gath = gather if with_allreduce else dense._same

        def dense_part():
            y = inp
            for i in range(stack.fkd):
                y = stack.dense_layer(i, y, b, allreduce)
            return stack.lm_head(y, gath)

        def moe_part():
            y = moe_in
            for j in range(stack.n_moe):
                y = stack.moe_layer(j, y, b, allreduce, plans, record=False)
            return y

        return dense_part, moe_part

    return parts, plans, logits


def _checked(rank: _dist.Rank, values: dict[str, Any], stack: Stack, x_all, pts: list[tuple[int, int]]) -> bool:
    """The step at the smallest point against the float32 reference of the same timed stack and routing."""
    cb, ck = dense.smallest(pts)
    rank.phase(f"checking batch {cb}, {ck} draft tokens against the float32 reference")
    _, plans, out = _routed(rank, values, stack, x_all, cb, ck)
    out = out.float().cpu()
    limit = max(
        _timing.REFERENCE_LIMIT[values["dtype"]], {"bf16": 0.0, "fp8": 8e-2, "int4": 8e-2}[values["experts_dtype"]]
    )
    against = f"unsharded float32 reference at batch {cb}, {ck} draft tokens, over the step's routing"
    return _timing.check_reference(
        rank,
        "moe_step",
        out,
        lambda: reference(values, rank.world_size, x_all[: cb * (ck + 1)], cb, plans),
        limit,
        against,
    )


def _time_point(
    rank: _dist.Rank, values: dict[str, Any], sampling: _timing.Sampling, stack: Stack, x_all, b: int, k: int
):
    """One point's samples per variant (full, compute only; allreduce only at world size > 1), each sample the
    dense part + the MoE part x (MoE layers / timed); with the experts touched per layer (all ranks, this rank)."""
    ws, t = rank.world_size, b * (k + 1)
    factor = stack.moe_layers / stack.n_moe
    times: dict[str, list[float]] = {}
    parts, plans, _ = _routed(rank, values, stack, x_all, b, k)
    touched = sum(p.touched for p in plans) / len(plans)
    local = sum(len(p.experts) for p in plans) / len(plans)
    for name, with_ar in (("full", True), ("compute", False)) if ws > 1 else (("compute", False),):
        rank.phase(f"batch {b}, {k} draft tokens ({t} tokens, {touched:.0f} experts a layer): timing {name}")
        dense_part, moe_part = parts(with_ar)
        a, m = sampling.samples(rank, dense_part), sampling.samples(rank, moe_part)
        times[name] = [x + y * factor for x, y in zip(a, m)]
        del dense_part, moe_part
    del parts, plans
    if ws > 1:
        ar = _dist.Allreduce(rank, (t, stack.geo["hidden_size"]), values["dtype"])
        rank.phase(f"batch {b}, {k} draft tokens: timing allreduce only")
        times["comm"] = sampling.samples(rank, _dist.repeated(ar, 2 * stack.geo["layers"]))
        del ar
    times.setdefault("full", times["compute"])
    return times, touched, local


def _emit_point(values, stack: Stack, tags, times, b: int, k: int, touched: float, local: float, bw: float):
    """Rank 0's lines of one point: the dense stand-in's (verify_step's), the read floor and the efficiency."""
    geo, t = stack.geo, b * (k + 1)
    elt = _dist.DTYPE_BYTES[values["dtype"]]
    read = step_bytes(stack, geo, values, b, local, elt)
    point = {
        "batch": b,
        "draft_tokens": k,
        "tokens": t,
        "context": values["context"],
        "bytes": t * geo["hidden_size"] * elt,
        "kv_bytes": b * values["context"] * stack.dim * elt * geo["layers"],
        C.EXPERTS_TOUCHED: round(touched, 2),
        "experts_touched_uniform": round(expected_touched(geo["experts"], geo["experts_top_k"], t), 2),
        "experts_touched_rank": round(local, 2),
        "read_bytes": int(read),
    }
    ws = stack.ws
    row = dense._emit_point({**values, "layers": geo["layers"]}, ws, point, times, [], tags, tags, None)
    floor_ms = read / (bw * 1e9) * 1e3
    eff = floor_ms / row["full"]["median"] if row["full"]["median"] > 0 else 0.0
    emit(M.STEP_FLOOR_MS, floor_ms, "ms", derived="read_bytes / copy bandwidth", **{**tags, **point})
    emit(M.STEP_BW_EFFICIENCY, eff, "", derived="floor / verify_time", **{**tags, **point})
    row.update(touched=touched, floor=floor_ms, eff=eff)
    return row


def step_bytes(stack: Stack, geo: dict[str, Any], values: dict[str, Any], b: int, local: float, elt: int) -> float:
    """The bytes one rank must read for the whole (scaled) step: attention weights of every layer, the
    dense MLPs, per MoE layer the router, the shared expert and its touched experts (the timed layers'
    mean), the KV cache once, the LM head share."""
    hid, ws, layers = geo["hidden_size"], stack.ws, geo["layers"]
    attn = (2 * hid * hid // ws + hid * stack.dim + stack.lora * hid) * elt
    mlp = 3 * hid * geo["dense_ffn_size"] // ws * elt
    shared = 3 * hid * geo["shared_experts"] * geo["moe_ffn_size"] // ws * elt
    router = hid * geo["experts"] * elt
    experts = local * stack.banks[0].bytes_per_expert(hid)
    cache = b * values["context"] * stack.dim * elt
    head = hid * geo["vocab_size"] // ws * elt
    return layers * (attn + cache) + stack.fkd * mlp + stack.moe_layers * (router + shared + experts) + head


def _print_table(rows: list[dict[str, Any]], label: str) -> None:
    print(label, flush=True)
    print(
        f"{'batch':>5} {'k':>2} {'tokens':>6} {'touched':>7} {'step_ms':>9} {'p10_ms':>9} {'p90_ms':>9} "
        f"{'floor_ms':>9} {'eff':>6}"
    )
    for r in rows:
        f = r["full"]
        print(
            f"{r['batch']:>5} {r['draft_tokens']:>2} {r['tokens']:>6} {r['touched']:>7.1f} {f['median']:>9.3f} "
            f"{f['p10']:>9.3f} {f['p90']:>9.3f} {r['floor']:>9.3f} {r['eff']:>6.1%}"
        )
    print(
        "step = dense layers + LM head + MoE layers x (MoE layers / timed); floor = bytes read / copy bandwidth",
        flush=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    announce_import("torch")
    return _dist.recipe_main(
        PROG, __doc__, SPEC, argv, validate=validate, measure=_measure, world_check=_divisible, min_world=1
    )


if __name__ == "__main__":
    sys.exit(main())
