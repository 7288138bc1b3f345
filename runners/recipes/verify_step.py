"""A synthetic tensor-parallel verify step over a batch of sequences: how much of it is allreduce?

    python -m runners.recipes.verify_step --backend gloo --world-size 2 --hidden-size 1024 --layers 4
    python -m runners.recipes.verify_step --backend nccl --mode graph            # 61 layers, 7168, 4 tokens
    python -m runners.recipes.verify_step --backend nccl --world-size 1 --mode graph \
        --batches 1,8,64 --draft-tokens 0,3,7                                    # one GPU, no allreduce

Per layer, sharded over the ranks as tensor parallelism shards a transformer layer:
  attention-like: h = norm(x); h @ W_in[hidden x hidden/ws] @ W_o[hidden/ws x hidden]
                  + the MLA cache read (below) -> allreduce
  MLP-like:       x @ W_up[hidden x ffn/ws] -> silu -> @ W_down[ffn/ws x hidden] -> allreduce
so 2 allreduces per layer (122 for 61 layers). A step verifies a batch of b sequences, each with
k draft tokens plus one (b x (k+1) tokens), and each sequence attends over its own KV cache of
`--context` positions in the MLA layout of DeepSeek-V3 / Kimi-K2.5: kv_lora_rank 512 + rope 64 =
576 values per token per layer, the same on every rank. The read is attention-like (absorbed MLA,
as a serving engine decodes): q = h @ W_q[hidden x 576] for each of the rank's heads, scores =
q . cache^T over the context, softmax, p @ cache[:, :512], summed over heads, @ W_kv[512 x hidden].
So a step reads b x context x 576 values per layer besides the weights.

`--geometry llama` swaps the layer for a Llama's (the engine model a real vLLM serves, issue 42): RMSNorm
(with its weight) -> grouped-query attention (q over `--heads`, k and v over `--kv-heads`, head size
hidden / heads, rotary positions, each sequence's new tokens attending causally over its own K/V cache of
`--context` positions and each other) -> o_proj -> allreduce; RMSNorm -> SwiGLU MLP
(down(silu(gate(x)) * up(x)), `--ffn-size` the intermediate size) -> allreduce; and after the last layer the
final RMSNorm and the LM head over `--vocab` (each rank its vocabulary shard; the logits' gather is not in the
step). Its lines are tagged geometry=llama, standin=dense, with hidden_size, ffn_size, layers, heads, kv_heads
and vocab, so the answer pairs them with an engine serving that geometry.

`--batches` and `--draft-tokens` are swept: every (b, k) is its own point, with its own metric
lines tagged batch, draft_tokens, tokens = b(k+1) and context. k = 0 is the plain decode step
(T_base(b), metric decode_step_ms). Without them: one point, batch 1, k = --tokens - 1.
Three variants are timed per point over the same stack: full (compute + allreduce), compute
only (no allreduce) and allreduce only. In-situ communication = full - compute only; its share
of the verify time and its cost per allreduce are reported beside the isolated allreduce-only
time. At world size 1 there is no allreduce: full = compute, and no communication figure is
emitted. The full variant is checked once (at the smallest point) against an unsharded float32
reference before timing.

Timing: eager samples are `--calls` steps back to back between two marks / calls (method
"nccl-tests"); graph samples are one replay of the captured step (method "graph-replay").
Marks are CUDA events, or with `--clock wall` the host clock after a synchronize (an
independent check; tag timer "wall-sync"). Headline lines carry their R samples.
Across nodes the figures are the world's (tag scope "world"), and the allreduce-only stack is
also timed within each node and among the node leaders (docs/recipes.md, "Across nodes").
torch is imported inside the functions that use it, so that `build_launch` validates without it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from app.protocol.metrics import ConditionTag as C
from app.protocol.metrics import MetricName as M
from app.protocol.metrics import emit
from app.protocol.recipes import RecipeError
from runners.recipes import _dist, _params, _timing
from runners.recipes._loading import announce_import
from runners.recipes._params import Param, module_recipe
from runners.recipes._params import validate as _validate

PROG = "runners.recipes.verify_step"
LLAMA = "llama"

# The points a step recipe sweeps: this one and moe_step, which builds on it.
POINTS = (
    Param("tokens", "int", None, "one point at batch 1: tokens verified per step, k + 1 (default 4)", minimum=1),
    Param("batches", "int_list", None, "sequences per step, swept (comma-separated; default 1)", minimum=1),
    Param("draft_tokens", "int_list", None, "draft tokens k per sequence, swept (0: the plain decode step)", minimum=0),
    Param("context", "int", 1024, "KV-cache positions per sequence (0: no cache read)", minimum=0),
)


def check_points(values: dict[str, Any]) -> None:
    """One point (tokens) or a sweep (draft_tokens), never both (raises RecipeError)."""
    if values["tokens"] is not None and values["draft_tokens"] is not None:
        raise RecipeError(
            "params.tokens (--tokens): give tokens (one point at batch 1) or draft_tokens (a sweep), not both"
        )


def mla_cache(*, heads: int | None, kv_lora_rank: int | None, kv_rope_dim: int | None) -> tuple[Param, ...]:
    """The MLA cache a step reads (heads, the latent and rope widths), with the recipe's defaults."""
    return (
        Param("heads", "int", heads, "attention heads reading the cache (sharded over ranks)", minimum=1),
        Param("kv_lora_rank", "int", kv_lora_rank, "MLA latent values cached per token per layer", minimum=1),
        Param("kv_rope_dim", "int", kv_rope_dim, "MLA rope values cached per token per layer", minimum=0),
    )


SPEC = (
    Param("backend", "choice", "gloo", "allreduce implementation", choices=_dist.BACKENDS),
    Param("mode", "choice", "eager", "eager, or the whole step captured in one CUDA graph", choices=_dist.MODES),
    _dist.WORLD_SIZE,
    Param("hidden_size", "int", 7168, "model hidden size", minimum=1),
    Param("ffn_size", "int", 18432, "MLP intermediate size (sharded over ranks)", minimum=1),
    Param("layers", "int", 61, "transformer layers (2 allreduces each)", minimum=1),
    *POINTS,
    *mla_cache(heads=64, kv_lora_rank=512, kv_rope_dim=64),
    Param(
        "geometry",
        "choice",
        "mla",
        "the layer: mla (the MLA cache read) or llama (GQA, SwiGLU)",
        choices=("mla", LLAMA),
    ),
    Param("kv_heads", "int", None, "llama: key/value heads of grouped-query attention (default: heads)", minimum=1),
    Param("vocab", "int", 0, "llama: the LM head's vocabulary (0: no LM head)", minimum=0),
    Param("dtype", "choice", "bf16", "element type", choices=tuple(_dist.DTYPE_BYTES)),
    *_timing.sampling(per="variant", seed="weights and input seed"),
    Param("profile", "bool", False, "after the timing, profile 3 steps of the first point into a Chrome trace"),
    *_dist.TIMEOUTS,
)


GEOMETRY = ("hidden_size", "ffn_size", "layers", "heads", "kv_lora_rank", "kv_rope_dim")
# The verify headlines carry p10/p90 as their spread (no min/max tags: the lines are unchanged).
HEADLINE_SPREAD = ("p10", "p90")
SHARDED = ("hidden_size", "ffn_size", "heads")


def points(values: dict[str, Any]) -> list[tuple[int, int]]:
    """The (batch, draft tokens) points of a validated run, in the order given, each once."""
    batches = values["batches"] or [1]
    ks = values["draft_tokens"] if values["draft_tokens"] is not None else [(values["tokens"] or 4) - 1]
    return list(dict.fromkeys((b, k) for b in batches for k in ks))


def validate(params: dict[str, Any]) -> dict[str, Any]:
    """Validated params with defaults (raises RecipeError naming the parameter)."""
    values = _validate(params, SPEC)
    _dist.static_checks(values, min_world=1)
    check_points(values)
    ws = values["world_size"]
    for name in SHARDED:
        if ws is not None and values[name] % ws:
            raise RecipeError(
                f"params.{name} (--{name.replace('_', '-')}): {values[name]} is not divisible by world size {ws}"
            )
    if values["geometry"] == LLAMA:
        _llama_checks(values, ws)
    elif values["kv_heads"] is not None or values["vocab"]:
        raise RecipeError("params.kv_heads (--kv-heads) and params.vocab (--vocab) are llama's: add --geometry llama")
    return values


def _llama_checks(values: dict[str, Any], ws: int | None) -> None:
    """The Llama layer's shape rules (raises RecipeError naming the parameter)."""
    heads, kv = values["heads"], values["kv_heads"] or values["heads"]
    if values["hidden_size"] % heads or (values["hidden_size"] // heads) % 2:
        raise RecipeError(
            f"params.heads (--heads): hidden size {values['hidden_size']} / {heads} heads must be a whole, even head size"
        )
    if heads % kv:
        raise RecipeError(f"params.kv_heads (--kv-heads): {heads} heads are not a multiple of {kv} key/value heads")
    for name, n in (("kv_heads", kv), ("vocab", values["vocab"])):
        if ws is not None and n % ws:
            raise RecipeError(f"params.{name} (--{name.replace('_', '-')}): {n} is not divisible by world size {ws}")


def _shard_weights(seed: int, layer: int, rank: int, ws: int, hidden: int, ffn: int, dtype, device, kv=None):
    """This rank's shards of one layer, regenerable by any rank (the reference check needs them).
    `kv` = (kv_lora_rank, cached values per token) adds the cache read's W_q and W_kv.

    Drawn on the device itself (the same seed gives the same values on every GPU of a kind),
    so regenerating 61 layers for the reference stays fast."""
    import torch

    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed * 7919 + layer * 131 + rank)
    h, f = hidden // ws, ffn // ws

    def w(rows: int, cols: int, fan_in: int):
        return (torch.randn(rows, cols, generator=gen, device=device) / fan_in**0.5).to(dtype=dtype)

    out = {
        "w_in": w(hidden, h, hidden),
        "w_o": w(h, hidden, hidden),
        "w_up": w(hidden, f, hidden),
        "w_down": w(f, hidden, ffn),
    }
    if kv is not None:
        lora, dim = kv
        out["w_q"] = w(hidden, dim, hidden)
        out["w_kv"] = w(lora, hidden, lora)
    return out


def _kv_cache(seed: int, layer: int, batch: int, context: int, dim: int, dtype, device):
    """One layer's MLA cache: `batch` sequences x `context` positions x `dim` values, the same on every
    rank (MLA caches one latent per token, not per head, so tensor parallelism replicates it)."""
    import torch

    gen = torch.Generator(device=torch.device(device)).manual_seed(seed * 104729 + layer * 7 + 3)
    return torch.randn(batch, context, dim, generator=gen, device=device).to(dtype)


def _cache_read(h, w, cache, heads: int, lora: int):
    """Absorbed-MLA attention of the step's tokens over their own sequence's cache: per head, scores
    q . cache^T over the context, softmax, p @ the cache's latent part; the heads' mean @ W_kv.
    h: [b x (k+1), hidden], sequence-major; cache: [b, context, dim]."""
    import torch

    b, _, dim = cache.shape
    t = h.shape[0]
    per = t // b
    q = (h @ w["w_q"]).view(b, per, 1, dim).expand(b, per, heads, dim).reshape(b, per * heads, dim)
    p = torch.softmax(torch.bmm(q, cache.transpose(1, 2)) * dim**-0.5, dim=-1)
    out = torch.bmm(p, cache[:, :, :lora]).view(t, heads, lora).mean(1)
    return out @ w["w_kv"]


def _norm(x):
    import torch

    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)


def _layer(x, w, allreduce, read=None):
    """One layer; `read(h)` adds the KV-cache read to the attention-like output before its allreduce."""
    import torch.nn.functional as F

    h = _norm(x)
    a = h @ w["w_in"] @ w["w_o"]
    if read is not None:
        a = a + read(h)
    x = x + allreduce(a)
    m = F.silu(_norm(x) @ w["w_up"])
    return x + allreduce(m @ w["w_down"])


def _reference(values: dict[str, Any], ws: int, x0, caches):
    """The same stack unsharded, in float32 on x0's device: full weight = concatenation of the shards;
    the cache read is the sum of every rank's heads' reads (over the same caches, in float32)."""
    import torch

    x = x0.float()
    lora = values["kv_lora_rank"]
    kv = (lora, lora + values["kv_rope_dim"]) if values["context"] else None
    heads = values["heads"] // ws
    for layer in range(values["layers"]):
        shards = [
            _shard_weights(
                values["seed"], layer, r, ws, values["hidden_size"], values["ffn_size"], torch.float32, x0.device, kv
            )
            for r in range(ws)
        ]
        full = {
            "w_in": torch.cat([s["w_in"] for s in shards], 1),
            "w_o": torch.cat([s["w_o"] for s in shards], 0),
            "w_up": torch.cat([s["w_up"] for s in shards], 1),
            "w_down": torch.cat([s["w_down"] for s in shards], 0),
        }
        read = None
        if caches[layer] is not None:
            cache = caches[layer].float()

            def read(h, cache=cache, shards=shards):
                return sum(_cache_read(h, s, cache, heads, lora) for s in shards)

        x = _layer(x, full, lambda t: t, read)
    return x


# ---- the Llama geometry (grouped-query attention, SwiGLU MLP, RMSNorm, LM head) ----------------------------


def _llama_shape(values: dict[str, Any], ws: int) -> tuple[int, int, int]:
    """(this rank's q heads, its key/value heads, the head size)."""
    heads = values["heads"]
    return heads // ws, (values["kv_heads"] or heads) // ws, values["hidden_size"] // heads


def _llama_weights(seed: int, layer: int, rank: int, ws: int, values: dict[str, Any], dtype, device):
    """This rank's shards of one Llama layer (q/k/v/gate/up by columns, o/down by rows) and the norms' weights
    (the same on every rank), regenerable by any rank for the reference."""
    import torch

    device = torch.device(device)
    hidden, ffn = values["hidden_size"], values["ffn_size"]
    heads, kv, hd = _llama_shape(values, ws)
    gen = torch.Generator(device=device).manual_seed(seed * 7919 + layer * 131 + rank + 11)
    shared = torch.Generator(device=device).manual_seed(seed * 6007 + layer * 17)

    def w(rows: int, cols: int, fan_in: int):
        return (torch.randn(rows, cols, generator=gen, device=device) / fan_in**0.5).to(dtype=dtype)

    def norm_weight():
        return (1 + 0.1 * torch.randn(hidden, generator=shared, device=device)).to(dtype=dtype)

    f = ffn // ws
    return {
        "w_q": w(hidden, heads * hd, hidden),
        "w_k": w(hidden, kv * hd, hidden),
        "w_v": w(hidden, kv * hd, hidden),
        "w_o": w(heads * hd, hidden, hidden),
        "w_gate": w(hidden, f, hidden),
        "w_up": w(hidden, f, hidden),
        "w_down": w(f, hidden, ffn),
        "n_attn": norm_weight(),
        "n_mlp": norm_weight(),
    }


def _llama_head(seed: int, rank: int, ws: int, values: dict[str, Any], dtype, device):
    """The final norm's weight (shared) and this rank's vocabulary shard of the LM head."""
    import torch

    device = torch.device(device)
    hidden = values["hidden_size"]
    gen = torch.Generator(device=device).manual_seed(seed * 3571 + rank)
    shared = torch.Generator(device=device).manual_seed(seed * 3571 + 997)
    return {
        "n_final": (1 + 0.1 * torch.randn(hidden, generator=shared, device=device)).to(dtype=dtype),
        "w_lm": (torch.randn(hidden, values["vocab"] // ws, generator=gen, device=device) / hidden**0.5).to(dtype),
    }


def _llama_cache(seed: int, layer: int, rank: int, batch: int, context: int, kv: int, hd: int, dtype, device):
    """This rank's K and V caches of one layer: [batch, its key/value heads, context, head size] each."""
    import torch

    def one(which: int):  # its own stream per tensor: the first b sequences are the same at any batch
        gen = torch.Generator(device=torch.device(device)).manual_seed(
            seed * 104729 + layer * 7 + rank * 13 + which * 5 + 5
        )
        return torch.randn(batch, kv, context, hd, generator=gen, device=device).to(dtype)

    return one(0), one(1)


def _rope_table(context: int, per: int, hd: int, dtype, device):
    """cos and sin at the step's positions context .. context + per - 1 (rotary, base 10,000)."""
    import torch

    half = hd // 2
    inv = 1.0 / (10000 ** (torch.arange(half, device=device, dtype=torch.float32) / half))
    ang = torch.arange(context, context + per, device=device, dtype=torch.float32)[:, None] * inv[None, :]
    return ang.cos().to(dtype), ang.sin().to(dtype)


def _rotate(x, cos, sin):
    import torch

    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)


def _causal_mask(context: int, per: int, device):
    """Each new token sees the whole cache and the sequence's new tokens up to itself."""
    import torch

    cols = torch.arange(context + per, device=device)
    return cols[None, :] <= (context + torch.arange(per, device=device))[:, None]


def _gqa(h, w, cache, b: int, heads: int, kv: int, hd: int, rope, mask):
    """Grouped-query attention of the step's tokens (sequence-major, b x per) over each sequence's own cache and
    its new tokens; returns the o_proj output (before the allreduce)."""
    import torch
    import torch.nn.functional as F

    t = h.shape[0]
    per = t // b
    q = (h @ w["w_q"]).view(b, per, heads, hd).transpose(1, 2)
    k = (h @ w["w_k"]).view(b, per, kv, hd).transpose(1, 2)
    v = (h @ w["w_v"]).view(b, per, kv, hd).transpose(1, 2)
    q, k = _rotate(q, *rope), _rotate(k, *rope)
    if cache is not None:
        k = torch.cat([cache[0][:b], k], 2)
        v = torch.cat([cache[1][:b], v], 2)
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=heads != kv)
    return o.transpose(1, 2).reshape(t, heads * hd) @ w["w_o"]


def _llama_layer(x, w, allreduce, attn):
    import torch.nn.functional as F

    x = x + allreduce(attn(_norm(x) * w["n_attn"]))
    h = _norm(x) * w["n_mlp"]
    return x + allreduce((F.silu(h @ w["w_gate"]) * (h @ w["w_up"])) @ w["w_down"])


def _lm_head(x, head):
    return (_norm(x) * head["n_final"]) @ head["w_lm"]


def _llama_stack(values: dict[str, Any], ws: int, rank: int, dtype, device, max_batch: int):
    """This rank's layers, caches and LM head (None without a vocabulary)."""
    heads, kv, hd = _llama_shape(values, ws)
    context = values["context"]
    layers = [_llama_weights(values["seed"], i, rank, ws, values, dtype, device) for i in range(values["layers"])]
    caches = [
        _llama_cache(values["seed"], i, rank, max_batch, context, kv, hd, dtype, device) if context else None
        for i in range(values["layers"])
    ]
    head = _llama_head(values["seed"], rank, ws, values, dtype, device) if values["vocab"] else None
    return layers, caches, head


def _llama_run(values: dict[str, Any], ws: int, stack, b: int, per: int, device):
    """The step's body over `stack` for b sequences of `per` tokens: run(allreduce)(x) -> hidden or logits."""
    layers, caches, head = stack
    heads, kv, hd = _llama_shape(values, ws)
    dtype = layers[0]["w_q"].dtype
    rope = _rope_table(values["context"], per, hd, dtype, device)
    mask = _causal_mask(values["context"], per, device)
    attns = [
        (lambda h, w=w, c=c: _gqa(h, w, c, b, heads, kv, hd, rope, mask)) for w, c in zip(layers, caches, strict=True)
    ]

    def run(allreduce, x):
        for w, attn in zip(layers, attns, strict=True):
            x = _llama_layer(x, w, allreduce, attn)
        return _lm_head(x, head) if head is not None else x

    return run


def _llama_reference(values: dict[str, Any], ws: int, x0, b: int, per: int):
    """The same Llama step unsharded, in float32: every shard concatenated (q/k/v/gate/up by columns, o/down by
    rows, the caches by key/value head); rank 0's vocabulary columns of the logits (what rank 0 computes)."""
    import torch

    f32, device = torch.float32, x0.device
    ranks = [_llama_stack(values, ws, r, f32, device, b) for r in range(ws)]
    cols, rows = ("w_q", "w_k", "w_v", "w_gate", "w_up"), ("w_o", "w_down")
    layers = []
    for i in range(values["layers"]):
        shards = [r[0][i] for r in ranks]
        full = {n: torch.cat([s[n] for s in shards], 1) for n in cols}
        full.update({n: torch.cat([s[n] for s in shards], 0) for n in rows})
        full.update(n_attn=shards[0]["n_attn"], n_mlp=shards[0]["n_mlp"])
        layers.append(full)
    caches = [
        (torch.cat([r[1][i][0] for r in ranks], 1), torch.cat([r[1][i][1] for r in ranks], 1))
        if values["context"]
        else None
        for i in range(values["layers"])
    ]
    head = ranks[0][2]
    run = _llama_run(values, 1, (layers, caches, head), b, per, device)
    return run(lambda t: t, x0.float())


RECIPE = module_recipe(PROG, SPEC, validate)


def smallest(pts: list[tuple[int, int]]) -> tuple[int, int]:
    """The point of fewest tokens: where a step is checked against its float32 reference."""
    return min(pts, key=lambda p: p[0] * (p[1] + 1))


class DenseStep:
    """This rank's dense stand-in: its layers (MLA or Llama) and caches for the run's largest batch, the step's
    input activations, and per point the bodies timed and the float32 reference."""

    def __init__(self, rank: _dist.Rank, values: dict[str, Any], pts: list[tuple[int, int]]):
        import torch

        self.rank, self.values, ws = rank, values, rank.world_size
        dtype = _timing.torch_dtype(values["dtype"])
        lora, context = values["kv_lora_rank"], values["context"]
        dim = lora + values["kv_rope_dim"]
        kv = (lora, dim) if context else None
        max_batch = max(b for b, _ in pts)
        self.llama = values["geometry"] == LLAMA
        self.weights: list[dict[str, Any]] = []
        self.caches: list[Any] = []
        if self.llama:
            self.stack = _llama_stack(values, ws, rank.rank, dtype, rank.device, max_batch)
        else:
            hidden, ffn = values["hidden_size"], values["ffn_size"]
            self.weights = [
                _shard_weights(values["seed"], i, rank.rank, ws, hidden, ffn, dtype, rank.device, kv)
                for i in range(values["layers"])
            ]
            self.caches = [
                _kv_cache(values["seed"], i, max_batch, context, dim, dtype, rank.device) if context else None
                for i in range(values["layers"])
            ]
        gen = torch.Generator().manual_seed(values["seed"] + 17)
        max_tokens = max(b * (k + 1) for b, k in pts)
        self.x_all = torch.randn(max_tokens, values["hidden_size"], generator=gen).to(dtype=dtype, device=rank.device)

    def bodies(self, b: int, k: int):
        """The point's three bodies over static buffers: full, compute only, allreduce only (None at ws 1)."""
        values, rank = self.values, self.rank
        inp = self.x_all[: b * (k + 1)]
        heads, lora = values["heads"] // rank.world_size, values["kv_lora_rank"]
        reads = [
            (lambda h, w=w, c=c[:b]: _cache_read(h, w, c, heads, lora)) if c is not None else None
            for w, c in zip(self.weights, self.caches)
        ]
        body = _llama_run(values, rank.world_size, self.stack, b, k + 1, rank.device) if self.llama else None

        def run(allreduce):
            if body is not None:
                return body(allreduce, inp)
            x = inp
            for w, read in zip(self.weights, reads):
                x = _layer(x, w, allreduce, read)
            return x

        if rank.world_size == 1:
            return (lambda: run(_same)), (lambda: run(_same)), None
        ar = _dist.Allreduce(rank, tuple(inp.shape), values["dtype"])
        reduce = _dist.reducer(ar)
        return (lambda: run(reduce)), (lambda: run(_same)), _dist.repeated(ar, 2 * values["layers"])

    def reference(self, b: int, k: int):
        """The point's step unsharded, in float32 (rank 0 computes it)."""
        x0, ws = self.x_all[: b * (k + 1)], self.rank.world_size
        if self.llama:
            return _llama_reference(self.values, ws, x0, b, k + 1)
        return _reference(self.values, ws, x0, [c[:b] if c is not None else None for c in self.caches])


def _same(x):
    return x


def _measure(rank: _dist.Rank, values: dict[str, Any]) -> int:
    ws = rank.world_size
    if any(values[name] % ws for name in SHARDED):
        print(f"verify_step: {_divisible(values, ws)}", file=sys.stderr)
        return 2
    if _dist.refused_across_nodes(rank, PROG):
        return 2
    sampling = _timing.Sampling.of(values)
    pts = points(values)
    step = DenseStep(rank, values, pts)
    tags = _tags(rank, values, sampling)
    _log_start(rank, values, tags, pts)
    cb, ck = smallest(pts)
    rank.phase(f"checking batch {cb}, {ck} draft tokens against the float32 reference")
    out = step.bodies(cb, ck)[0]().float().cpu()
    limit = _timing.REFERENCE_LIMIT[values["dtype"]]
    against = f"unsharded reference at batch {cb}, {ck} draft tokens"
    if not _timing.check_reference(rank, "verify_step", out, lambda: step.reference(cb, ck), limit, against):
        return 1
    topo = rank.topology
    world_tags = {**tags, **rank.scopes()[0].tags(topo)} if topo.nodes > 1 else tags
    rows = []
    for b, k in pts:
        times = _time_variants(rank, sampling, step.bodies(b, k), f"batch {b}, {k} draft tokens ({b * (k + 1)} tokens)")
        scoped = _time_scopes(rank, values, sampling, b, k) if topo.nodes > 1 else []
        if scoped is None:
            return 1
        if rank.rank == 0:
            point = _point(values, tags, b, k)
            rows.append(_emit_point(values, ws, point, times, scoped, tags, world_tags, topo))
    if rank.rank == 0:
        _print_table(rows, values, ws)
    if values["profile"]:
        sampling.profiled(rank, "verify_step", step.bodies(*pts[0])[0])
    return 0


def _tags(rank: _dist.Rank, values: dict[str, Any], sampling: _timing.Sampling) -> dict[str, Any]:
    """The conditions every line of the run carries (a multi-node world's also say where it spans)."""
    ws, layers, ffn = rank.world_size, values["layers"], values["ffn_size"]
    tags = {
        "backend": rank.backend,
        "mode": values["mode"],
        "world_size": ws,
        "dtype": values["dtype"],
        C.STANDIN: "dense",  # the dense stand-in (runners/recipes/moe_step.py is the MoE one)
        C.EXPERTS: 0,
        C.LAYERS_TIMED: layers,
        "standin_label": f"dense stand-in, {layers} layers, MLP {ffn}, no experts",
        "hidden_size": values["hidden_size"],
        "ffn_size": ffn,
        "layers": layers,
        "heads": values["heads"],
        "kv_dim": values["kv_lora_rank"] + values["kv_rope_dim"] if values["context"] else 0,
        "allreduces": 2 * layers if ws > 1 else 0,
        "scaled": _params.scaled(values, SPEC, GEOMETRY),
        **(_llama_tags(values) if values["geometry"] == LLAMA else {}),
        **sampling.tags(rank),
        **_dist.knob_tags(),
        **_dist.stack_tags(rank),
    }
    if rank.topology.nodes > 1:
        # Single-node trials keep their tags as they were; a multi-node world says where each figure is from.
        tags.update(rank.topology.tags())
    return tags


def _log_start(rank: _dist.Rank, values: dict[str, Any], tags: dict[str, Any], pts: list[tuple[int, int]]) -> None:
    rank.log(
        f"verify_step: backend={rank.backend} mode={values['mode']} world_size={rank.world_size} "
        f"layers={values['layers']} hidden={values['hidden_size']} ffn={values['ffn_size']} dtype={values['dtype']} "
        f"allreduces={tags['allreduces']} context={values['context']} heads={values['heads']} "
        f"kv_dim={tags['kv_dim']} timer={tags['timer']}; "
        f"{len(pts)} point(s) (batch, draft tokens): " + " ".join(f"({b},{k})" for b, k in pts)
    )


def _time_variants(rank: _dist.Rank, sampling: _timing.Sampling, bodies, where: str) -> dict[str, list[float]]:
    """Each variant's samples (full, compute only, allreduce only; compute alone at world size 1, where the
    step is its compute)."""
    full, compute_only, comm_only = bodies
    variants = [("full", full), ("compute", compute_only), ("comm", comm_only)] if comm_only else []
    times: dict[str, list[float]] = {}
    for name, body in variants or [("compute", compute_only)]:
        rank.phase(f"{where}: timing {name}")
        times[name] = sampling.samples(rank, body)
    times.setdefault("full", times["compute"])
    return times


def _time_scopes(rank: _dist.Rank, values: dict[str, Any], sampling: _timing.Sampling, b: int, k: int):
    """A multi-node world's allreduce-only samples within each node and among the leaders (None: a check
    failed)."""
    t = b * (k + 1)
    rank.phase(f"batch {b}, {k} draft tokens: timing allreduce only within each node, then across nodes")

    def prepare(view: _dist.Rank):
        part = _dist.Allreduce(view, (t, values["hidden_size"]), values["dtype"])
        ok, _, _ = _dist.check_allreduce(part, values["seed"], values["dtype"])
        return ok, _dist.repeated(part, 2 * values["layers"])

    found = _dist.time_scopes(rank, rank.scopes(), prepare, sampling)
    if found is None:
        print("verify_step: allreduce check FAILED within a node or across the node leaders", file=sys.stderr)
    return found


def _point(values: dict[str, Any], tags: dict[str, Any], b: int, k: int) -> dict[str, Any]:
    """One (batch, draft tokens) point's own tags: its tokens and the bytes it moves and reads."""
    t, elt = b * (k + 1), _dist.DTYPE_BYTES[values["dtype"]]
    return {
        "batch": b,
        "draft_tokens": k,
        "tokens": t,
        "context": values["context"],
        "bytes": t * values["hidden_size"] * elt,
        "kv_bytes": b * values["context"] * tags["kv_dim"] * elt * values["layers"],
    }


def _llama_tags(values: dict[str, Any]) -> dict[str, Any]:
    """A Llama stand-in's geometry as conditions (ConditionTag.GEOMETRY_KEYS): the answer pairs it with an engine
    serving that geometry. Not scaled: the geometry given is the model's own."""
    kv = values["kv_heads"] or values["heads"]
    hd = values["hidden_size"] // values["heads"]
    return {
        C.GEOMETRY: LLAMA,
        C.KV_HEADS: kv,
        C.VOCAB: values["vocab"],
        "head_dim": hd,
        "kv_dim": 2 * kv * hd if values["context"] else 0,  # K and V values cached per token per layer
        "scaled": False,
        "standin_label": (
            f"Llama stand-in: grouped-query attention ({values['heads']} heads, {kv} KV heads), SwiGLU MLP "
            f"{values['ffn_size']}, {values['layers']} layers, hidden {values['hidden_size']}, vocab {values['vocab']}"
        ),
    }


def _ms(samples_us: list[float]) -> list[float]:
    return [s / 1000 for s in samples_us]


def _emit_point(values, ws, point, times, scoped, tags, world_tags, topo) -> dict[str, Any]:
    """The metric lines of one (batch, draft tokens) point (rank 0); returns its row of the table."""
    layers = values["layers"]
    pt = {**world_tags, **point}
    full, compute = _ms(times["full"]), _ms(times["compute"])
    f = _timing.emit_summary(M.VERIFY_TIME_MS, full, "ms", spread=HEADLINE_SPREAD, **pt)
    if point["draft_tokens"] == 0:
        _timing.emit_summary(M.DECODE_STEP_MS, full, "ms", spread=HEADLINE_SPREAD, **pt)
    c = _timing.emit_summary(M.VERIFY_COMPUTE_MS, compute, "ms", spread=HEADLINE_SPREAD, **pt)
    row: dict[str, Any] = {**point, "full": f, "compute": c, "comm": None}
    if ws == 1:
        return row  # no allreduce: no communication figure (not a zero)
    comm_ms = max(f["median"] - c["median"], 0.0)
    isolated = _ms(times["comm"])
    share = comm_ms / f["median"] if f["median"] > 0 else 0.0
    in_situ_us = comm_ms * 1000 / (2 * layers)
    emit(M.VERIFY_COMM_MS, comm_ms, "ms", derived="verify_time - compute_only", **pt)
    i = _timing.emit_summary(M.VERIFY_COMM_ISOLATED_MS, isolated, "ms", spread=HEADLINE_SPREAD, **pt)
    emit(M.VERIFY_COMM_SHARE, share, "", **pt)
    emit(M.ALLREDUCE_IN_SITU_US, in_situ_us, "us", **pt)
    per_ar = [s * 1000 / (2 * layers) for s in isolated]
    emit(M.ALLREDUCE_ISOLATED_US, i["median"] * 1000 / (2 * layers), "us", samples=per_ar, **pt)
    row.update(comm=i, comm_ms=comm_ms, share=share, in_situ_us=in_situ_us, scoped=[])
    # The same allreduces alone within each node and among the leaders: the world's communication
    # split into what stays on a node and what crosses the fabric.
    for scope, samples in scoped:
        s_ms = _ms(samples)
        s = _timing.summarize(s_ms)
        scope_tags = {**tags, **point, **scope.tags(topo)}
        emit(M.VERIFY_COMM_ISOLATED_MS, s["median"], "ms", samples=s_ms, **scope_tags)
        emit(M.ALLREDUCE_ISOLATED_US, s["median"] * 1000 / (2 * layers), "us", **scope_tags)
        where = f"node {topo.names[scope.node]}" if scope.node is not None else scope.name
        row["scoped"].append((f"allreduce only, {where}", s))
    return row


def _print_table(rows: list[dict[str, Any]], values: dict[str, Any], ws: int) -> None:
    layers = values["layers"]
    print(
        f"{'batch':>5} {'k':>2} {'tokens':>6} {'verify_ms':>10} {'p10_ms':>9} {'p90_ms':>9} {'compute_ms':>10}"
        + (f" {'comm_ms':>8} {'share':>6} {'ar_us':>7} {'isolated_ms':>11}" if ws > 1 else "")
    )
    for r in rows:
        f, c = r["full"], r["compute"]
        line = (
            f"{r['batch']:>5} {r['draft_tokens']:>2} {r['tokens']:>6} {f['median']:>10.3f} {f['p10']:>9.3f} "
            f"{f['p90']:>9.3f} {c['median']:>10.3f}"
        )
        if r["comm"] is not None:
            line += f" {r['comm_ms']:>8.3f} {r['share']:>6.1%} {r['in_situ_us']:>7.1f} {r['comm']['median']:>11.3f}"
        print(line)
        for label, s in r.get("scoped", []):
            print(f"      {label}: {s['median']:.3f} ms (p10 {s['p10']:.3f}, p90 {s['p90']:.3f})")
    if ws > 1:
        print(f"communication in situ = verify - compute only; ar_us: per allreduce x {2 * layers}", flush=True)
    else:
        print("world size 1: no allreduce; the verify step is its compute", flush=True)
    for r in rows:
        if r["draft_tokens"] == 0:
            print(
                f"decode step (batch {r['batch']}, {values['backend']}, {values['mode']}): "
                f"{r['full']['median']:.3f} ms",
                flush=True,
            )


def _divisible(values: dict[str, Any], world: int) -> str | None:
    if any(values[name] % world for name in SHARDED):
        return (
            f"hidden size {values['hidden_size']}, ffn size {values['ffn_size']} and heads {values['heads']} "
            f"must be divisible by the world size {world}"
        )
    return None


def main(argv: Sequence[str] | None = None) -> int:
    announce_import("torch")  # the page shows "importing torch" while it loads
    return _dist.recipe_main(
        PROG, __doc__, SPEC, argv, validate=validate, measure=_measure, world_check=_divisible, min_world=1
    )


if __name__ == "__main__":
    sys.exit(main())
