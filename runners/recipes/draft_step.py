"""One EAGLE-3 draft step on one device over a batch of sequences: a decoder layer plus the LM head.

    python -m runners.recipes.draft_step                       # Kimi-K2.5 geometry, CUDA, eager
    python -m runners.recipes.draft_step --mode graph --batches 1,8,64,128
    python -m runners.recipes.draft_step --device cpu --hidden-size 256 --vocab-size 1000 --ffn-size 512 --heads 4

The EAGLE-3 draft head (Li et al. 2025) fuses low, middle and high target features
(fc: 3 x hidden -> hidden), runs one decoder layer whose attention input is the token
embedding concatenated with that feature (2 x hidden), attends over the sequence's KV cache of
`--context-len` positions (the step's own key and value written in place at the next one), and
ends in the LM head (hidden -> vocab) and a greedy pick. One draft step = that for a batch of b
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

import sys
from collections.abc import Sequence
from typing import Any

from runners.recipes import RecipeError, _params, _timing
from runners.recipes._loading import announce_import
from runners.recipes._params import Param, module_recipe, parse_cli, usage_error
from runners.recipes._params import validate as _validate
from runners.recipes.metric import MetricName as M
from runners.recipes.metric import emit_phase

PROG = "runners.recipes.draft_step"

SPEC = (
    Param("device", "choice", "auto", "cuda, cpu, or auto (cuda when visible)", choices=("auto", "cuda", "cpu")),
    Param("mode", "choice", "eager", "eager, or the step captured in one CUDA graph", choices=("eager", "graph")),
    Param("hidden_size", "int", 7168, "draft hidden size (the target's)", minimum=1),
    Param("vocab_size", "int", 163840, "LM head vocabulary", minimum=1),
    Param("ffn_size", "int", 18432, "draft MLP intermediate size", minimum=1),
    Param("heads", "int", 64, "attention heads (head dim = hidden / heads)", minimum=1),
    Param("context_len", "int", 1024, "KV-cache positions per sequence", minimum=1),
    Param("tokens", "int", None, "one point: sequences per draft step, one token each (default 1)", minimum=1),
    Param("batches", "int_list", None, "sequences per draft step, swept (comma-separated)", minimum=1),
    Param("dtype", "choice", "bf16", "element type", choices=("bf16", "fp16", "fp32")),
    Param("warmup", "int", 5, "untimed steps", minimum=0),
    Param("iters", "int", 20, "timed samples (R)", minimum=1),
    Param("calls", "int", 10, "eager: steps back to back per sample (K)", minimum=1),
    _timing.CLOCK,
    Param("seed", "int", 0, "weights seed", minimum=0),
    Param("profile", "bool", False, "after the timing, profile 3 steps of the first batch into a Chrome trace"),
)
GEOMETRY = ("hidden_size", "vocab_size", "ffn_size")


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
    return values


def batches(values: dict[str, Any]) -> list[int]:
    """The batch sizes of a validated run, in the order given, each once."""
    return list(dict.fromkeys(values["batches"] or [values["tokens"] or 1]))


RECIPE = module_recipe(PROG, SPEC, validate)


class DraftHead:
    """Random weights of one EAGLE-3 draft head, and per-sequence KV caches for up to `max_batch`
    sequences; `step(b)` runs one draft step for the first b sequences on static buffers."""

    def __init__(self, values: dict[str, Any], device, dtype, max_batch: int = 1):
        import torch

        h, f, v = values["hidden_size"], values["ffn_size"], values["vocab_size"]
        self.heads, self.head_dim = values["heads"], h // values["heads"]
        self.context = values["context_len"]
        gen = torch.Generator(device=device).manual_seed(values["seed"])

        def w(rows: int, cols: int):
            return (torch.randn(rows, cols, generator=gen, device=device) / rows**0.5).to(dtype)

        self.fc = w(3 * h, h)
        self.qkv = w(2 * h, 3 * h)
        self.o = w(h, h)
        self.gate_up = w(h, 2 * f)
        self.down = w(f, h)
        self.lm_head = w(h, v)
        self.embed = w(v, h)
        # Each sequence's own cache: `context` positions written before, one more for this step's token.
        shape = (max_batch, self.heads, self.context + 1, self.head_dim)
        self.k_cache = torch.randn(shape, generator=gen, device=device).to(dtype)
        self.v_cache = torch.randn(shape, generator=gen, device=device).to(dtype)
        self.features = torch.randn(max_batch, 3 * h, generator=gen, device=device).to(dtype)  # low/mid/high
        self.token_ids = torch.zeros(max_batch, dtype=torch.long, device=device)

    @staticmethod
    def _norm(x):
        import torch

        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)

    def step(self, b: int = 1):
        import torch
        import torch.nn.functional as F

        hidden = self.features[:b] @ self.fc
        x = torch.cat([self._norm(self.embed[self.token_ids[:b]]), self._norm(hidden)], dim=-1)
        q, k, v = (x @ self.qkv).split(hidden.shape[-1], dim=-1)

        def heads(z):  # [b, hidden] -> [b, heads, 1, head_dim]
            return z.view(b, self.heads, 1, self.head_dim)

        keys, vals = self.k_cache[:b], self.v_cache[:b]
        keys[:, :, self.context : self.context + 1] = heads(k)
        vals[:, :, self.context : self.context + 1] = heads(v)
        att = F.scaled_dot_product_attention(heads(q), keys, vals)
        hidden = hidden + att.reshape(b, -1) @ self.o
        gate, up = (self._norm(hidden) @ self.gate_up).chunk(2, dim=-1)
        hidden = hidden + (F.silu(gate) * up) @ self.down
        logits = self._norm(hidden) @ self.lm_head
        return logits.argmax(-1)


def _time_point(head: DraftHead, b: int, values: dict[str, Any], device, timer) -> list[float] | None:
    """R samples (ms per step) at batch b, after a check of the step's output; None when it is wrong."""
    import torch

    out = head.step(b)
    if out.shape != (b,) or not bool(((out >= 0) & (out < values["vocab_size"])).all()):
        print(
            f"draft_step: the step at batch {b} produced {tuple(out.shape)} token ids, not {b} in "
            f"[0, {values['vocab_size']})",
            file=sys.stderr,
            flush=True,
        )
        return None
    for _ in range(values["warmup"]):
        head.step(b)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    if values["mode"] == "graph":
        side = torch.cuda.Stream(device=device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            head.step(b)
        torch.cuda.current_stream(device).wait_stream(side)
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured):
            head.step(b)
        for _ in range(values["warmup"]):
            captured.replay()
        torch.cuda.synchronize(device)
        samples = _timing.time_per_call(captured.replay, timer, values["iters"])
        del captured
    else:
        samples = _timing.time_back_to_back(lambda: head.step(b), timer, values["calls"], values["iters"])
    return [s / 1000 for s in samples]


def run(values: dict[str, Any]) -> int:
    import torch

    device_name = values["device"]
    if device_name == "auto":
        device_name = "cuda" if torch.cuda.is_available() else "cpu"
    if device_name == "cuda" and not torch.cuda.is_available():
        usage_error(PROG, f"device cuda: no CUDA GPU is visible to torch {torch.__version__}")
    if values["mode"] == "graph" and device_name != "cuda":
        usage_error(PROG, "graph mode needs CUDA graphs; no CUDA GPU is visible (device cpu)")
    device = torch.device(device_name, 0) if device_name == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    sizes = batches(values)
    head = DraftHead(values, device, _timing.torch_dtype(values["dtype"]), max(sizes))
    timer = _timing.device_timer(device, values["clock"])
    graph = values["mode"] == "graph"
    tags = {
        "mode": values["mode"],
        "device": device.type,
        "hidden_size": values["hidden_size"],
        "vocab_size": values["vocab_size"],
        "ffn_size": values["ffn_size"],
        "heads": values["heads"],
        "context_len": values["context_len"],
        "context": values["context_len"],
        "dtype": values["dtype"],
        "scaled": _params.scaled(values, SPEC, GEOMETRY),
        "timer": timer.name,
        "method": "graph-replay" if graph else "nccl-tests",
        "sample_count": values["iters"],
        "calls_per_sample": 1 if graph else values["calls"],
        "torch": torch.__version__,
    }
    for b in sizes:
        emit_phase(f"batch {b}: timing")
        samples = _time_point(head, b, values, device, timer)
        if samples is None:
            return 1
        stats = _timing.emit_summary(M.DRAFT_STEP_MS, samples, "ms", batch=b, tokens=b, **tags)
        print(
            f"draft step ({values['mode']}, {device.type}, hidden {values['hidden_size']}, vocab "
            f"{values['vocab_size']}, batch {b}, context {values['context_len']}): median {stats['median']:.3f} ms "
            f"(p10 {stats['p10']:.3f}, p90 {stats['p90']:.3f}) over {values['iters']} samples",
            flush=True,
        )
    if values["profile"]:
        b = sizes[0]

        def sync() -> None:
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        _timing.profile_steps("draft_step", lambda: head.step(b), cuda=device.type == "cuda", synchronize=sync)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    announce_import("torch")  # the page shows "importing torch" while it loads
    argv = list(sys.argv[1:] if argv is None else argv)
    values = parse_cli(PROG, __doc__.splitlines()[0], SPEC, argv)
    try:
        validate(values)
    except RecipeError as exc:
        usage_error(PROG, str(exc))
    return run(values)


if __name__ == "__main__":
    sys.exit(main())
