"""One EAGLE-3 draft step on one device over a batch of sequences: a decoder layer plus the LM head.

    python -m runners.recipes.draft_step                       # Kimi-K2.5 geometry, CUDA, eager
    python -m runners.recipes.draft_step --mode graph --batches 1,8,64,128
    python -m runners.recipes.draft_step --device cpu --hidden-size 256 --vocab-size 1000 --ffn-size 512 --heads 4
    python -m runners.recipes.draft_step --world-size 8 --mode graph --draft-vocab 32000   # under the target's TP 8

The EAGLE-3 draft head (Li et al. 2025) fuses low, middle and high target features
(fc: 3 x hidden -> hidden), runs one decoder layer whose attention input is the token
embedding concatenated with that feature (2 x hidden), attends over the sequence's KV cache of
`--context-len` positions (the step's own key and value written in place at the next one), and
ends in the LM head (hidden -> draft vocabulary, `--draft-vocab`: 32,000 as EAGLE-3 heads ship, or the
target's 163,840) and a greedy pick; the token embedding is the target's (`--vocab-size` rows, b read).
Under the target's tensor parallelism (`--world-size N`, one process per rank as the collective recipes
start them: gloo on CPU, NCCL on GPUs) each rank holds heads/N, ffn/N and draft_vocab/N of the LM head;
the attention and MLP outputs are allreduced and the logits all-gathered before the pick, as an engine
runs the head, and those collectives are inside the timed step (tag world_size; collectives 3). One draft step = that for a batch of b
sequences, one token each (top-k 1), each sequence over its own cache. `--batches` is swept:
every b is its own point and metric line (tags batch, context). The weights are random: only the
time is meant. Timing as the collective recipes: eager samples are `--calls` steps back to back
between two marks / calls (method "nccl-tests"); graph samples are one replay of the captured
step (method "graph-replay"); marks are CUDA events, or with `--clock wall` the host clock after
a synchronize (tag timer "wall-sync"). Metric draft_step_ms (median, with p10/p90/min/max and
its R samples).
torch is imported inside the functions that use it, so that `build_launch` validates without it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from app.protocol.metrics import MetricName as M
from app.protocol.metrics import emit_phase
from app.protocol.recipes import RecipeError
from runners.recipes import _dist, _params, _timing
from runners.recipes._loading import announce_import
from runners.recipes._params import Param, module_recipe, parse_cli, usage_error
from runners.recipes._params import validate as _validate

PROG = "runners.recipes.draft_step"

SPEC = (
    Param("device", "choice", "auto", "cuda, cpu, or auto (cuda when visible)", choices=("auto", "cuda", "cpu")),
    Param("mode", "choice", "eager", "eager, or the step captured in one CUDA graph", choices=("eager", "graph")),
    Param("hidden_size", "int", 7168, "draft hidden size (the target's)", minimum=1),
    Param("vocab_size", "int", 163840, "the target's vocabulary (the draft's token embedding)", minimum=1),
    Param(
        "draft_vocab", "int", 32000, "the draft head's LM head vocabulary (EAGLE-3: 32,000; or the full one)", minimum=1
    ),
    Param("world_size", "int", 1, "the target's tensor parallelism: ranks sharing the head (processes)", minimum=1),
    Param("ffn_size", "int", 18432, "draft MLP intermediate size", minimum=1),
    Param("heads", "int", 64, "attention heads (head dim = hidden / heads)", minimum=1),
    Param("context_len", "int", 1024, "KV-cache positions per sequence", minimum=1),
    Param("tokens", "int", None, "one point: sequences per draft step, one token each (default 1)", minimum=1),
    Param("batches", "int_list", None, "sequences per draft step, swept (comma-separated)", minimum=1),
    Param("dtype", "choice", "bf16", "element type", choices=("bf16", "fp16", "fp32")),
    *_timing.sampling(warmup=5, calls=10, seed="weights seed"),
    Param("profile", "bool", False, "after the timing, profile 3 steps of the first batch into a Chrome trace"),
    *_dist.TIMEOUTS,
)
GEOMETRY = ("hidden_size", "vocab_size", "ffn_size")
SHARDED = ("heads", "ffn_size", "draft_vocab")


def validate(params: dict[str, Any]) -> dict[str, Any]:
    """Validated params with defaults (raises RecipeError naming the parameter)."""
    values = _validate(params, SPEC)
    if values["hidden_size"] % values["heads"]:
        raise RecipeError(
            f"params.heads (--heads): hidden size {values['hidden_size']} is not divisible by {values['heads']} heads"
        )
    if values["device"] == "cpu" and values["mode"] == "graph":
        raise RecipeError("params.mode (--mode): graph mode needs CUDA graphs; device cpu has none")
    if values["tokens"] is not None and values["batches"] is not None:
        raise RecipeError("params.tokens (--tokens): give tokens (one point) or batches (a sweep), not both")
    for name in SHARDED:
        if values[name] % values["world_size"]:
            raise RecipeError(
                f"params.{name} (--{name.replace('_', '-')}): {values[name]} is not divisible by world size "
                f"{values['world_size']}"
            )
    if values["profile"] and values["world_size"] > 1:
        raise RecipeError("params.profile (--profile): profiling runs at world size 1 only")
    return values


def batches(values: dict[str, Any]) -> list[int]:
    """The batch sizes of a validated run, in the order given, each once."""
    return list(dict.fromkeys(values["batches"] or [values["tokens"] or 1]))


RECIPE = module_recipe(PROG, SPEC, validate)


class DraftHead:
    """Random weights of one EAGLE-3 draft head, and per-sequence KV caches for up to `max_batch`
    sequences; `step(b)` runs one draft step for the first b sequences on static buffers."""

    def __init__(self, values: dict[str, Any], device, dtype, max_batch: int = 1, rank=None):
        """`rank` (a _dist.Rank at world size > 1): this rank's share of a tensor-parallel head, with the
        collectives an engine runs (allreduce after attention and MLP, all-gather of the logits)."""
        import torch

        ws = rank.world_size if rank is not None else 1
        h, f, v = values["hidden_size"], values["ffn_size"] // ws, values["draft_vocab"] // ws
        self.heads, self.head_dim = values["heads"] // ws, h // values["heads"]
        self.rank = rank
        self.dtype_name = values["dtype"]
        self.context = values["context_len"]
        gen = torch.Generator(device=device).manual_seed(values["seed"] * 1009 + (rank.rank if rank else 0))

        def w(rows: int, cols: int):
            return (torch.randn(rows, cols, generator=gen, device=device) / rows**0.5).to(dtype)

        hl = self.heads * self.head_dim  # this rank's heads
        self.fc = w(3 * h, h)
        self.qkv = w(2 * h, 3 * hl)
        self.o = w(hl, h)
        self.gate_up = w(h, 2 * f)
        self.down = w(f, h)
        self.lm_head = w(h, v)
        self.embed = w(values["vocab_size"], h)
        # Each sequence's own cache: `context` positions written before, one more for this step's token.
        shape = (max_batch, self.heads, self.context + 1, self.head_dim)
        self.k_cache = torch.randn(shape, generator=gen, device=device).to(dtype)
        self.v_cache = torch.randn(shape, generator=gen, device=device).to(dtype)
        self.features = torch.randn(max_batch, 3 * h, generator=gen, device=device).to(dtype)  # low/mid/high
        self.token_ids = torch.zeros(max_batch, dtype=torch.long, device=device)
        self._allreduce: dict[int, Any] = {}
        self._gather: dict[int, Any] = {}

    def _collective(self, ops: dict[int, Any], make: Callable[[tuple[int, ...]], Any], x):
        """x through this rank's collective for x's batch (made once per batch size); x itself alone."""
        if self.rank is None:
            return x
        b = x.shape[0]
        if b not in ops:
            ops[b] = make(tuple(x.shape))
        return ops[b](x)

    def _reduce(self, x):
        return self._collective(
            self._allreduce, lambda shape: _dist.reducer(_dist.Allreduce(self.rank, shape, self.dtype_name)), x
        )

    def _gather_logits(self, part):
        return self._collective(
            self._gather, lambda shape: _dist.AllGather(self.rank, (shape[0], shape[1]), part.dtype), part
        )

    @staticmethod
    def _norm(x):
        import torch

        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)

    def step(self, b: int = 1):
        import torch
        import torch.nn.functional as F

        hidden = self.features[:b] @ self.fc
        x = torch.cat([self._norm(self.embed[self.token_ids[:b]]), self._norm(hidden)], dim=-1)
        q, k, v = (x @ self.qkv).split(self.heads * self.head_dim, dim=-1)

        def heads(z):  # [b, hidden] -> [b, heads, 1, head_dim]
            return z.view(b, self.heads, 1, self.head_dim)

        keys, vals = self.k_cache[:b], self.v_cache[:b]
        keys[:, :, self.context : self.context + 1] = heads(k)
        vals[:, :, self.context : self.context + 1] = heads(v)
        att = F.scaled_dot_product_attention(heads(q), keys, vals)
        hidden = hidden + self._reduce(att.reshape(b, -1) @ self.o)
        gate, up = (self._norm(hidden) @ self.gate_up).chunk(2, dim=-1)
        hidden = hidden + self._reduce((F.silu(gate) * up) @ self.down)
        logits = self._gather_logits(self._norm(hidden) @ self.lm_head)
        return logits.argmax(-1)


def _time_point(
    head: DraftHead, b: int, values: dict[str, Any], sampling: _timing.Sampling, place: _timing.Place
) -> list[float] | None:
    """R samples (ms per step) at batch b, after a check of the step's output; None when it is wrong. A
    tensor-parallel step is as slow as its slowest rank: the samples are the slowest rank's."""
    out = head.step(b)
    if out.shape != (b,) or not bool(((out >= 0) & (out < values["draft_vocab"])).all()):
        print(
            f"draft_step: the step at batch {b} produced {tuple(out.shape)} token ids, not {b} in "
            f"[0, {values['draft_vocab']})",
            file=sys.stderr,
            flush=True,
        )
        return None
    return [s / 1000 for s in sampling.samples(place, lambda: head.step(b))]


def run(values: dict[str, Any], rank: _dist.Rank | None = None) -> int:
    """Time the points on this process's device; `rank`: this rank of a tensor-parallel head (rank 0 reports)."""
    import torch

    device_name = values["device"]
    if device_name == "auto":
        device_name = "cuda" if torch.cuda.is_available() else "cpu"
    if device_name == "cuda" and not torch.cuda.is_available():
        usage_error(PROG, f"device cuda: no CUDA GPU is visible to torch {torch.__version__}")
    if values["mode"] == "graph" and device_name != "cuda":
        usage_error(PROG, "graph mode needs CUDA graphs; no CUDA GPU is visible (device cpu)")
    device = torch.device(device_name, 0) if device_name == "cuda" else torch.device("cpu")
    if rank is not None:
        device = rank.device
    if device.type == "cuda":
        torch.cuda.set_device(device)
    sizes = batches(values)
    head = DraftHead(values, device, _timing.torch_dtype(values["dtype"]), max(sizes), rank)
    report = rank is None or rank.rank == 0
    place: _timing.Place = rank if rank is not None else _timing.Alone(device)
    sampling = _timing.Sampling.of(values)
    tags = {
        "mode": values["mode"],
        "device": device.type,
        "hidden_size": values["hidden_size"],
        "vocab_size": values["vocab_size"],
        "draft_vocab": values["draft_vocab"],
        "world_size": values["world_size"],
        "collectives": 3 if values["world_size"] > 1 else 0,
        "ffn_size": values["ffn_size"],
        "heads": values["heads"],
        "context_len": values["context_len"],
        "context": values["context_len"],
        "dtype": values["dtype"],
        "scaled": _params.scaled(values, SPEC, GEOMETRY),
        **sampling.tags(place),
        "torch": torch.__version__,
    }
    for b in sizes:
        emit_phase(f"batch {b}: timing")
        samples = _time_point(head, b, values, sampling, place)
        if samples is None:
            return 1
        if not report:
            continue
        stats = _timing.emit_summary(M.DRAFT_STEP_MS, samples, "ms", batch=b, tokens=b, **tags)
        print(
            f"draft step ({values['mode']}, {device.type}, TP {values['world_size']}, hidden {values['hidden_size']}, "
            f"vocab {values['vocab_size']}, draft vocab {values['draft_vocab']}, batch {b}, context {values['context_len']}): median {stats['median']:.3f} ms "
            f"(p10 {stats['p10']:.3f}, p90 {stats['p90']:.3f}) over {values['iters']} samples",
            flush=True,
        )
    if values["profile"]:
        b = sizes[0]
        _timing.profile_steps(
            "draft_step", lambda: head.step(b), cuda=device.type == "cuda", synchronize=place.synchronize
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    announce_import("torch")  # the page shows "importing torch" while it loads
    argv = list(sys.argv[1:] if argv is None else argv)
    values = parse_cli(PROG, __doc__.splitlines()[0], SPEC, argv)
    try:
        validate(values)
    except RecipeError as exc:
        usage_error(PROG, str(exc))
    if values["world_size"] == 1:
        return run(values)
    _dist.apply_safe_env(os.environ)
    import torch

    on_gpu = values["device"] == "cuda" or (values["device"] == "auto" and torch.cuda.is_available())
    if _dist.is_worker():
        rank = _dist.Rank("nccl" if on_gpu else "gloo", values["init_timeout_s"])
        code = 1
        try:
            code = run(values, rank)
        finally:
            rank.finish(code, values["teardown_timeout_s"])
    if on_gpu and torch.cuda.device_count() < values["world_size"]:
        usage_error(PROG, f"world size {values['world_size']} needs as many GPUs; {torch.cuda.device_count()} visible")
    return _dist.launch_ranks(
        PROG, PROG, argv, values["world_size"], values["run_timeout_s"], values["teardown_timeout_s"]
    )


if __name__ == "__main__":
    sys.exit(main())
