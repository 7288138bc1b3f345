"""The MoE stand-in: a tensor-parallel decode / verify step of a mixture-of-experts model (Kimi-K2.5 by default).

    python -m runners.recipes.moe_step --backend gloo --world-size 1 --geometry custom --hidden-size 64 ...
    python -m runners.recipes.moe_step --backend nccl --world-size 1 --mode graph \
        --batches 1,8,64 --draft-tokens 0,3,7 --experts-dtype fp8                    # one H200

A sibling of `verify_step` (the dense stand-in), sharing its MLA cache read, its timing, its variants and
its metric lines. Per layer:
  attention:  h = norm(x); h @ W_in @ W_o + the MLA read over each sequence's own cache (verify_step's
              absorbed-MLA read, heads sharded over the ranks) -> allreduce
  layers < first_k_dense:  a SwiGLU MLP (gate, up, down; 18,432 for Kimi) sharded over the ranks -> allreduce
  MoE layers: a router over the step's hidden states (sigmoid scores plus a correction bias choose the
              top-k, the chosen scores normalized x routed_scaling_factor: DeepSeek-V3's noaux_tc without
              group limits), the shared expert(s), and for each expert the step's tokens were routed to:
              gather its tokens, SwiGLU (moe_intermediate), scale by the gate, scatter-add -> allreduce
and at the end the LM head (each rank its vocab/ws share, the logits all-gathered at world size > 1).

Experts' layout: tensor parallelism (default) gives every rank its moe_intermediate/ws share of every
expert; `--expert-parallel` gives each rank experts/ws whole experts (its tokens are the same on every rank
under TP attention, so each rank runs its own experts over them and the allreduce sums; no all-to-all).
Experts' dtype: bf16, fp8 (e4m3, a scale per output channel and per token, `torch._scaled_mm`) or int4
(group-128 asymmetric, `torch._weight_int4pack_mm`), each only where the node's torch runs it (probed).

Routing is real and seeded: the point's tokens (random activations, seeded) go through the stack once
eagerly; each MoE layer's router picks the experts, and that plan (which experts, which tokens) is kept.
The timed step (eager or in a CUDA graph) recomputes the router and the gate weights every time and runs
the kept plan: a graph replays that step's routing, which is the routing of its own inputs.
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
from runners.recipes import _dist, _timing
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
EXPERT_BYTES = {"bf16": 2.0, "fp8": 1.0, "int4": 0.5}
INT4_GROUP = 128
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
            f"({'torch._scaled_mm, SM 8.9 or newer' if values['experts_dtype'] == 'fp8' else 'torch._weight_int4pack_mm'}"
            "); backend gloo runs on CPU: use bf16"
        )
    if values["experts_dtype"] == "int4" and geo["hidden_size"] % INT4_GROUP:
        raise RecipeError(f"params.hidden_size (--hidden-size): int4 experts need a multiple of {INT4_GROUP}")
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
ATTN, MLP, ROUTER, SHARED, EXPERT, HEAD = range(6)


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


def quantize_int4(w):
    """[K, N] float32 -> (q uint8 [N, K] in 0..15, scales_and_zeros [K/g, N, 2] float32), group 128 along K,
    asymmetric: w ~ (q - 8) * scale + zero (the tinygemm convention of torch._weight_int4pack_mm)."""
    import torch

    k, n = w.shape
    g = w.t().reshape(n, k // INT4_GROUP, INT4_GROUP)
    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    scale = ((hi - lo) / 15).clamp(min=1e-12)
    q = ((g - lo) / scale).round().clamp(0, 15).to(torch.uint8).reshape(n, k)
    zero = lo + 8 * scale
    sz = torch.cat([scale, zero], -1).permute(1, 0, 2).contiguous()  # [K/g, N, 2]
    return q, sz


def dequantize_int4(q, sz):
    import torch

    n, k = q.shape
    scale = sz[..., 0].t().repeat_interleave(INT4_GROUP, 1)  # [N, K]
    zero = sz[..., 1].t().repeat_interleave(INT4_GROUP, 1)
    return ((q.float() - 8) * scale + zero).t().contiguous().to(torch.float32)


class ExpertBank:
    """One MoE layer's routed experts on this rank, in their dtype: `run(e, x)` is expert e's SwiGLU."""

    def __init__(self, dtype_name: str, act_dtype, device, count: int, hidden: int, ffn: int, fp8_rowwise: bool = True):
        import torch

        self.kind, self.act, self.ffn = dtype_name, act_dtype, ffn
        self.rowwise = fp8_rowwise
        self.slot: dict[int, int] = {}
        # bf16/fp8: one stacked tensor per role; int4: a list of packed tensors per role
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
        else:
            self.gu, self.gu_s, self.down, self.down_s = [], [], [], []  # packed per expert

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
        else:
            for w, packed, scales in ((gu, self.gu, self.gu_s), (down, self.down, self.down_s)):
                q, sz = quantize_int4(w)
                packed.append(torch._convert_weight_to_int4pack((q[:, ::2] << 4 | q[:, 1::2]).contiguous(), 8))
                scales.append(sz.to(torch.bfloat16))

    def dequantized(self, gu, down):
        """What the reference computes with: the float32 weights as this dtype stores them."""
        if self.kind == "fp8":
            return dequantize_fp8(*quantize_fp8(gu, self.rowwise)), dequantize_fp8(*quantize_fp8(down, self.rowwise))
        if self.kind == "int4":
            return dequantize_int4(*quantize_int4(gu)), dequantize_int4(*quantize_int4(down))
        return gu, down

    def _mm(self, x, which: str, i: int):
        import torch

        if self.kind == "bf16":
            return x @ (self.gu if which == "gu" else self.down)[i]
        if self.kind == "fp8":
            w = (self.gu if which == "gu" else self.down)[i]
            ws = (self.gu_s if which == "gu" else self.down_s)[i]
            amax = x.abs().amax(-1, keepdim=True) if self.rowwise else x.abs().amax()
            sx = (amax.float() / FP8_MAX).clamp(min=1e-12)
            xq = (x.float() / sx).to(torch.float8_e4m3fn)
            if not self.rowwise:  # tensorwise: one scale each (0-dim), cuBLASLt's fp8 path
                sx, ws = sx.reshape(()), ws.reshape(())
            return torch._scaled_mm(xq, w.t(), scale_a=sx, scale_b=ws, out_dtype=self.act)
        packed = (self.gu if which == "gu" else self.down)[i]
        sz = (self.gu_s if which == "gu" else self.down_s)[i]
        return torch._weight_int4pack_mm(x.to(torch.bfloat16), packed, INT4_GROUP, sz).to(self.act)

    def run(self, e: int, x):
        import torch.nn.functional as F

        i = self.slot[e]
        gate, up = self._mm(x, "gu", i).chunk(2, dim=-1)
        return self._mm((F.silu(gate) * up).contiguous(), "down", i)

    def bytes_per_expert(self, hidden: int) -> float:
        return 3 * hidden * self.ffn * EXPERT_BYTES[self.kind]


def probe_experts_dtype(kind: str, device, act_dtype, fp8_rowwise: bool = True) -> str | None:
    """None when this torch and device run `kind` experts; else why not (the trial is refused, exit 2)."""
    import torch

    if kind == "bf16":
        return None
    if device.type != "cuda":
        return f"{kind} experts need a CUDA GPU"
    cap = torch.cuda.get_device_capability(device)
    if kind == "fp8" and cap < (8, 9):
        return f"fp8 experts need SM 8.9 or newer for torch._scaled_mm; this GPU is SM {cap[0]}.{cap[1]}"
    try:
        bank = ExpertBank(kind, act_dtype, device, 1, 256, 256, fp8_rowwise)
        bank.put(0, torch.randn(256, 512, device=device) / 16, torch.randn(256, 256, device=device) / 16)
        x = torch.randn(16, 256, device=device).to(act_dtype)
        out = bank.run(0, x).float()
        torch.cuda.synchronize(device)
        if not bool(torch.isfinite(out).all()):
            return f"{kind} experts: the probe's product is not finite"
    except (RuntimeError, AttributeError, TypeError, NotImplementedError) as exc:
        op = "torch._scaled_mm" if kind == "fp8" else "torch._weight_int4pack_mm"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"{kind} experts: {op} does not run on torch {torch.__version__}, SM {cap[0]}.{cap[1]}: {first}"
    return None


# ---- the routing plan -------------------------------------------------------------------------------


@dataclass
class Plan:
    """One MoE layer's routing at one point: the chosen experts per token, and per local touched expert
    its token rows and their flat (token x k + slot) gate positions; `touched` counts all ranks' experts."""

    topk: Any  # [T, k] long, on the device
    experts: list[tuple[int, Any, Any]]  # (expert, rows, flat positions), on the device
    touched: int


def make_plan(topk, local: set[int], pad_to: int, device) -> Plan:
    import torch

    t, k = topk.shape
    flat = topk.reshape(-1).cpu()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=int(flat.max()) + 1)
    starts = torch.cumsum(counts, 0) - counts
    experts = []
    touched = 0
    for e in torch.nonzero(counts).flatten().tolist():
        touched += 1
        if e not in local:
            continue
        pos = order[starts[e] : starts[e] + counts[e]]
        rows = pos // k
        if pad_to > 1 and len(pos) % pad_to:
            extra = pad_to - len(pos) % pad_to  # padded rows: token 0 with a zero gate (flat index t*k)
            rows = torch.cat([rows, torch.zeros(extra, dtype=rows.dtype)])
            pos = torch.cat([pos, torch.full((extra,), t * k, dtype=pos.dtype)])
        experts.append((e, rows.to(device), pos.to(device)))
    return Plan(topk, experts, touched)


def route(h, w_router, bias, top_k: int, scaling: float):
    """Sigmoid scores; the top-k chosen by score + bias; their scores normalized, x routed_scaling_factor."""
    import torch

    scores = torch.sigmoid((h @ w_router).float())
    topk = torch.topk(scores + bias.float(), top_k, dim=-1).indices
    return scores, topk


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
            plans.append(make_plan(topk, set(self.local), self.pad, h.device))
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
    bank = ExpertBank(values["experts_dtype"], torch.float32, dev, 0, hid, 0, values["fp8_scaling"] == "rowwise")

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


def worker(values: dict[str, Any]) -> None:
    _dist.run_rank(values, _measure)


def copy_bandwidth_gbps(rank: _dist.Rank) -> float:
    """Device-to-device copy rate, bytes read + written per second (GB/s): the floor's ceiling."""
    import torch

    n = (2 << 30) if rank.on_gpu else (64 << 20)
    src = torch.empty(n, dtype=torch.uint8, device=rank.device).random_(0, 255)
    dst = torch.empty_like(src)
    timer = _dist.timer_for(rank)
    samples = _timing.time_back_to_back(lambda: dst.copy_(src), timer, 5, 5 if rank.on_gpu else 2)
    us = sorted(samples)[len(samples) // 2]
    return 2 * n / (us * 1e-6) / 1e9


def standin_label(geo_name: str, values: dict[str, Any], geo: dict[str, Any]) -> str:
    timed = geo["first_k_dense"] + values["moe_layers_timed"]
    scaling = "timed and scaled" if timed < geo["layers"] else "timed"
    return (
        f"MoE stand-in, {GEOMETRY_NAMES[geo_name]} geometry, {values['experts_dtype']} experts, "
        f"{timed} of {geo['layers']} layers {scaling}"
    )


def _measure(rank: _dist.Rank, values: dict[str, Any]) -> int:
    import torch

    ws = rank.world_size
    problem = _divisible(values, ws)
    if problem:
        print(f"moe_step: {problem}", file=sys.stderr)
        return 2
    dtype = _timing.torch_dtype(values["dtype"])
    refusal = probe_experts_dtype(values["experts_dtype"], rank.device, dtype, values["fp8_scaling"] == "rowwise")
    if not rank.all_true(refusal is None):
        if rank.rank == 0:
            print(f"moe_step: error: {refusal or 'another rank refused the experts dtype'}", file=sys.stderr)
        return 2
    if _dist.refused_across_nodes(rank, PROG):
        return 2
    geo_name, geo = geometry_of(values)
    elt = _dist.DTYPE_BYTES[values["dtype"]]
    hid, ctx = geo["hidden_size"], values["context"]
    pts = points(values)
    max_batch = max(b for b, _ in pts)
    max_tokens = max(b * (k + 1) for b, k in pts)
    rank.phase("measuring the copy bandwidth")
    bw = copy_bandwidth_gbps(rank)
    rank.phase(f"building {geo['first_k_dense'] + values['moe_layers_timed']} distinct layers")
    stack = Stack(values, rank, dtype, max_batch)
    gen = torch.Generator().manual_seed(values["seed"] + 17)
    x_all = torch.randn(max_tokens, hid, generator=gen).to(dtype=dtype, device=rank.device)
    graph = values["mode"] == "graph"
    timer = _dist.timer_for(rank, values["clock"])
    label = standin_label(geo_name, values, geo)
    timed_layers = stack.fkd + stack.n_moe
    factor = stack.moe_layers / stack.n_moe
    defaults = GEOMETRIES["kimi-k2.5" if geo_name == "custom" else geo_name]
    tags: dict[str, Any] = {
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
        C.LAYERS: geo["layers"],
        C.LAYERS_TIMED: timed_layers,
        "moe_layers_timed": stack.n_moe,
        "layer_scaling": f"{stack.fkd} dense + {stack.n_moe} MoE layers timed; MoE part x {factor:g}",
        "standin_label": label,
        "hidden_size": hid,
        "ffn_size": geo["dense_ffn_size"],
        "moe_ffn_size": geo["moe_ffn_size"],
        "first_k_dense": geo["first_k_dense"],
        "shared_experts": geo["shared_experts"],
        "vocab_size": geo["vocab_size"],
        "expert_parallel": values["expert_parallel"],
        "heads": geo["heads"],
        "kv_dim": stack.dim if ctx else 0,
        "allreduces": 2 * geo["layers"] if ws > 1 else 0,
        "scaled": any(
            geo[n] < defaults[n]
            for n in ("hidden_size", "dense_ffn_size", "moe_ffn_size", "experts", "vocab_size", "heads")
        ),
        "timer": timer.name,
        "method": "graph-replay" if graph else "nccl-tests",
        "sample_count": values["iters"],
        "calls_per_sample": 1 if graph else values["calls"],
        "copy_bandwidth_gbps": round(bw, 1),
        **_dist.knob_tags(),
        **_dist.stack_tags(rank),
    }
    rank.log(
        f"moe_step: {label} (MoE part x {factor:g}); backend={rank.backend} mode={values['mode']} world_size={ws} "
        f"experts={geo['experts']} top_k={geo['experts_top_k']} moe_ffn={geo['moe_ffn_size']} "
        f"{'expert' if values['expert_parallel'] else 'tensor'}-parallel experts, context={ctx}, "
        f"copy bandwidth {bw:.0f} GB/s; {len(pts)} point(s): " + " ".join(f"({b},{k})" for b, k in pts)
    )
    if rank.rank == 0:
        emit(M.COPY_BANDWIDTH_GBPS, bw, "GB/s", **tags)

    def build(b: int, k: int):
        """The point's routing pass (eager, with the allreduces: every rank routes the same hidden states),
        then its timed parts over static buffers: parts(with_allreduce) = (dense layers + LM head, the MoE
        layers over the routed plans); also the plans and the pass's logits."""
        t = b * (k + 1)
        inp = x_all[:t]
        ar = _dist.Allreduce(rank, (t, hid), values["dtype"]) if ws > 1 else None
        gather_op = _dist.AllGather(rank, (t, geo["vocab_size"] // ws), dtype) if ws > 1 else None

        def reduce(x):
            assert ar is not None
            ar.buffer.copy_(x)
            return ar().clone()  # the buffer is reused by the next allreduce

        def gather(part):
            return gather_op(part) if gather_op is not None else part

        def identity(x):
            return x

        plans: list[Plan] = []
        x = inp
        for i in range(stack.fkd):
            x = stack.dense_layer(i, x, b, reduce if ar else identity)
        moe_in = x.clone()
        for j in range(stack.n_moe):
            x = stack.moe_layer(j, x, b, reduce if ar else identity, plans, record=True)
        logits = stack.lm_head(x, gather)

        def parts(with_allreduce: bool):
            allreduce = reduce if (with_allreduce and ar is not None) else identity
            gath = gather if with_allreduce else identity

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

    cb, ck = min(pts, key=lambda p: p[0] * (p[1] + 1))
    rank.phase(f"checking batch {cb}, {ck} draft tokens against the float32 reference")
    _, plans, out = build(cb, ck)
    out = out.float().cpu()
    rank.synchronize()
    ok = True
    if rank.rank == 0:
        ref = reference(values, ws, x_all[: cb * (ck + 1)], cb, plans).cpu()
        rel = float((out - ref).norm() / ref.norm())
        limit = {"bf16": 5e-2, "fp16": 1e-2, "fp32": 1e-4}[values["dtype"]]
        limit = max(limit, {"bf16": 0.0, "fp8": 8e-2, "int4": 8e-2}[values["experts_dtype"]])
        ok = rel <= limit and bool(torch.isfinite(out).all())
        print(
            f"moe_step: correctness {'ok' if ok else 'FAILED'} vs unsharded float32 reference at batch {cb}, "
            f"{ck} draft tokens, over the step's routing (relative error {rel:.3g}, limit {limit:g})",
            flush=True,
        )
    if not rank.all_true(ok):
        return 1
    del out, plans

    def timed(body) -> list[float]:
        if graph:
            captured = _dist.capture_graph(rank, body)
            samples = _dist.time_graph(rank, captured, values["warmup"], values["iters"], values["clock"])
            del captured
        else:
            samples = _dist.time_eager(rank, body, values["warmup"], values["calls"], values["iters"], values["clock"])
        return rank.max_across(samples)

    rows = []
    for b, k in pts:
        t = b * (k + 1)
        times: dict[str, list[float]] = {}
        parts, plans, _ = build(b, k)
        touched = sum(p.touched for p in plans) / len(plans)
        local = sum(len(p.experts) for p in plans) / len(plans)
        for name, with_ar in (("full", True), ("compute", False)) if ws > 1 else (("compute", False),):
            rank.phase(f"batch {b}, {k} draft tokens ({t} tokens, {touched:.0f} experts a layer): timing {name}")
            dense_part, moe_part = parts(with_ar)
            a, m = timed(dense_part), timed(moe_part)
            times[name] = [x + y * factor for x, y in zip(a, m)]
            del dense_part, moe_part
        del parts, plans
        if ws > 1:
            ar = _dist.Allreduce(rank, (t, hid), values["dtype"])

            def comm_only(ar=ar):
                for _ in range(2 * geo["layers"]):
                    ar()

            rank.phase(f"batch {b}, {k} draft tokens: timing allreduce only")
            times["comm"] = timed(comm_only)
            del ar
        times.setdefault("full", times["compute"])
        read = step_bytes(stack, geo, values, b, local, elt)
        point = {
            "batch": b,
            "draft_tokens": k,
            "tokens": t,
            "context": ctx,
            "bytes": t * hid * elt,
            "kv_bytes": b * ctx * stack.dim * elt * geo["layers"],
            C.EXPERTS_TOUCHED: round(touched, 2),
            "experts_touched_rank": round(local, 2),
            "read_bytes": int(read),
        }
        if rank.rank == 0:
            row = dense._emit_point({**values, "layers": geo["layers"]}, ws, point, times, [], tags, tags, None)
            floor_ms = read / (bw * 1e9) * 1e3
            eff = floor_ms / row["full"]["median"] if row["full"]["median"] > 0 else 0.0
            emit(M.STEP_FLOOR_MS, floor_ms, "ms", derived="read_bytes / copy bandwidth", **{**tags, **point})
            emit(M.STEP_BW_EFFICIENCY, eff, "", derived="floor / verify_time", **{**tags, **point})
            row.update(touched=touched, floor=floor_ms, eff=eff)
            rows.append(row)
    if rank.rank == 0:
        _print_table(rows, label)
    return 0


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


def _world_check(values: dict[str, Any], world: int) -> str | None:
    return _divisible(values, world)


def main(argv: Sequence[str] | None = None) -> int:
    announce_import("torch")
    return _dist.recipe_main(
        PROG, __doc__, SPEC, argv, validate=validate, worker=worker, world_check=_world_check, min_world=1
    )


if __name__ == "__main__":
    sys.exit(main())
