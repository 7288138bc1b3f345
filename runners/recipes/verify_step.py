"""A synthetic tensor-parallel verify step: how much of it is allreduce?

    python -m runners.recipes.verify_step --backend gloo --world-size 2 --hidden-size 1024 --layers 4
    python -m runners.recipes.verify_step --backend nccl --mode graph            # 61 layers, 7168, 4 tokens

Per layer, sharded over the ranks as tensor parallelism shards a transformer layer:
  attention-like: x[tokens x hidden] @ W_in[hidden x hidden/ws] -> x_shard @ W_o[hidden/ws x hidden] -> allreduce
  MLP-like:       x @ W_up[hidden x ffn/ws] -> silu -> @ W_down[ffn/ws x hidden] -> allreduce
so 2 allreduces per layer (122 for 61 layers). Three variants are timed over the same stack:
full (compute + allreduce), compute only (no allreduce) and allreduce only. In-situ
communication = full - compute only; its share of the verify time and its cost per allreduce
are reported as metric lines, beside the isolated allreduce-only time. The full variant is
checked once against an unsharded float32 reference before timing.

Timing: eager samples are `--calls` steps back to back between two marks / calls (method
"nccl-tests"); graph samples are one replay of the captured step (method "graph-replay").
At `--tokens 1` the full step is also reported as decode_step_ms: the synthetic plain decode
step (T_base) with the same backend and mode.
Across nodes the figures are the world's (tag scope "world"), and the allreduce-only stack is
also timed within each node and among the node leaders (docs/recipes.md, "Across nodes").
torch is imported inside the functions that use it, so that `build_launch` validates without it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from runners.recipes import RecipeError, _dist
from runners.recipes._loading import announce_import
from runners.recipes._params import Param, module_recipe
from runners.recipes._params import validate as _validate
from runners.recipes.metric import MetricName as M
from runners.recipes.metric import emit

PROG = "runners.recipes.verify_step"

SPEC = (
    Param("backend", "choice", "gloo", "allreduce implementation", choices=_dist.BACKENDS),
    Param("mode", "choice", "eager", "eager, or the whole step captured in one CUDA graph", choices=_dist.MODES),
    _dist.WORLD_SIZE,
    Param("hidden_size", "int", 7168, "model hidden size", minimum=1),
    Param("ffn_size", "int", 18432, "MLP intermediate size (sharded over ranks)", minimum=1),
    Param("layers", "int", 61, "transformer layers (2 allreduces each)", minimum=1),
    Param("tokens", "int", 4, "tokens verified per step (draft tokens)", minimum=1),
    Param("dtype", "choice", "bf16", "element type", choices=tuple(_dist.DTYPE_BYTES)),
    Param("warmup", "int", 3, "untimed steps per variant", minimum=0),
    Param("iters", "int", 20, "timed samples per variant (R)", minimum=1),
    Param("calls", "int", 3, "eager: steps back to back per sample (K)", minimum=1),
    Param("seed", "int", 0, "weights and input seed", minimum=0),
    *_dist.TIMEOUTS,
)


GEOMETRY = ("hidden_size", "ffn_size", "layers")


def validate(params: dict[str, Any]) -> dict[str, Any]:
    """Validated params with defaults (raises RecipeError naming the parameter)."""
    values = _validate(params, SPEC)
    _dist.static_checks(values)
    ws = values["world_size"]
    for name in ("hidden_size", "ffn_size"):
        if ws is not None and values[name] % ws:
            raise RecipeError(
                f"params.{name} (--{name.replace('_', '-')}): {values[name]} is not divisible by world size {ws}"
            )
    return values


def _shard_weights(seed: int, layer: int, rank: int, ws: int, hidden: int, ffn: int, dtype, device):
    """This rank's shards of one layer, regenerable by any rank (the reference check needs them).

    Drawn on the device itself (the same seed gives the same values on every GPU of a kind),
    so regenerating 61 layers for the reference stays fast."""
    import torch

    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed * 7919 + layer * 131 + rank)
    h, f = hidden // ws, ffn // ws

    def w(rows: int, cols: int, fan_in: int):
        return (torch.randn(rows, cols, generator=gen, device=device) / fan_in**0.5).to(dtype=dtype)

    return {
        "w_in": w(hidden, h, hidden),
        "w_o": w(h, hidden, hidden),
        "w_up": w(hidden, f, hidden),
        "w_down": w(f, hidden, ffn),
    }


def _norm(x):
    import torch

    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)


def _layer(x, w, allreduce):
    import torch.nn.functional as F

    a = _norm(x) @ w["w_in"]
    x = x + allreduce(a @ w["w_o"])
    m = F.silu(_norm(x) @ w["w_up"])
    return x + allreduce(m @ w["w_down"])


def _reference(values: dict[str, Any], ws: int, x0):
    """The same stack unsharded, in float32 on x0's device: full weight = concatenation of the shards."""
    import torch

    x = x0.float()
    for layer in range(values["layers"]):
        shards = [
            _shard_weights(
                values["seed"], layer, r, ws, values["hidden_size"], values["ffn_size"], torch.float32, x0.device
            )
            for r in range(ws)
        ]
        full = {
            "w_in": torch.cat([s["w_in"] for s in shards], 1),
            "w_o": torch.cat([s["w_o"] for s in shards], 0),
            "w_up": torch.cat([s["w_up"] for s in shards], 1),
            "w_down": torch.cat([s["w_down"] for s in shards], 0),
        }
        x = _layer(x, full, lambda t: t)
    return x


RECIPE = module_recipe(PROG, SPEC, validate)


def worker(values: dict[str, Any]) -> None:
    _dist.run_rank(values, _measure)


def _measure(rank: _dist.Rank, values: dict[str, Any]) -> int:
    import torch

    ws = rank.world_size
    hidden, ffn, layers, tokens = values["hidden_size"], values["ffn_size"], values["layers"], values["tokens"]
    if hidden % ws or ffn % ws:
        print(f"verify_step: hidden {hidden} and ffn {ffn} must divide by world size {ws}", file=sys.stderr)
        return 2
    dtype = _dist.torch_dtype(values["dtype"])
    weights = [
        _shard_weights(values["seed"], layer, rank.rank, ws, hidden, ffn, dtype, rank.device) for layer in range(layers)
    ]
    ar = _dist.Allreduce(rank, (tokens, hidden), values["dtype"])

    def reduce(t):
        ar.buffer.copy_(t)
        return ar().clone()  # the buffer is reused by the next allreduce

    gen = torch.Generator().manual_seed(values["seed"] + 17)
    x0 = torch.randn(tokens, hidden, generator=gen).to(dtype=dtype, device=rank.device)
    inp = x0.clone()

    def full():
        x = inp
        for w in weights:
            x = _layer(x, w, reduce)
        return x

    def compute_only():
        x = inp
        for w in weights:
            x = _layer(x, w, lambda t: t)
        return x

    def comm_only():
        for _ in range(2 * layers):
            ar()

    graph = values["mode"] == "graph"
    tags = {
        "backend": rank.backend,
        "mode": values["mode"],
        "world_size": ws,
        "dtype": values["dtype"],
        "hidden_size": hidden,
        "ffn_size": ffn,
        "layers": layers,
        "tokens": tokens,
        "allreduces": 2 * layers,
        "bytes": tokens * hidden * _dist.DTYPE_BYTES[values["dtype"]],
        "scaled": _dist.scaled(values, SPEC, GEOMETRY),
        "timer": _dist.timer_for(rank).name,
        "method": "graph-replay" if graph else "nccl-tests",
        "samples": values["iters"],
        "calls_per_sample": 1 if graph else values["calls"],
        **_dist.knob_tags(),
        **_dist.stack_tags(rank),
    }
    topo = rank.topology
    multi = topo.nodes > 1
    if _dist.refused_across_nodes(rank, PROG):
        return 2
    scopes = rank.scopes()
    if multi:
        # Single-node trials keep their tags as they were; a multi-node world says where each figure is from.
        tags.update(topo.tags())
    world_tags = {**tags, **scopes[0].tags(topo)} if multi else tags
    rank.log(
        f"verify_step: backend={rank.backend} mode={values['mode']} world_size={ws} layers={layers} "
        f"tokens={tokens} hidden={hidden} ffn={ffn} dtype={values['dtype']} allreduces={2 * layers}"
    )

    out = full().float().cpu()
    rank.synchronize()
    ok = True
    if rank.rank == 0:
        ref = _reference(values, ws, x0).cpu()
        rel = float((out - ref).norm() / ref.norm())
        limit = {"bf16": 5e-2, "fp16": 1e-2, "fp32": 1e-4}[values["dtype"]]
        ok = rel <= limit and bool(torch.isfinite(out).all())
        print(
            f"verify_step: correctness {'ok' if ok else 'FAILED'} vs unsharded reference "
            f"(relative error {rel:.3g}, limit {limit:g})",
            flush=True,
        )
    if not rank.all_true(ok):
        return 1

    times: dict[str, list[float]] = {}
    for name, body in (("full", full), ("compute", compute_only), ("comm", comm_only)):
        rank.phase(f"timing {name}")
        if graph:
            captured = _dist.capture_graph(rank, body)
            times[name] = _dist.time_graph(rank, captured, values["warmup"], values["iters"])
            del captured
        else:
            times[name] = _dist.time_eager(rank, body, values["warmup"], values["calls"], values["iters"])
        times[name] = rank.max_across(times[name])
    scoped: list[tuple[_dist.Scope, list[float]]] = []
    if multi:
        rank.phase("timing allreduce only within each node, then across nodes")

        def prepare(view: _dist.Rank):
            part = _dist.Allreduce(view, (tokens, hidden), values["dtype"])
            ok, _, _ = _dist.check_allreduce(part, values["seed"], values["dtype"])

            def comm_in_scope():
                for _ in range(2 * layers):
                    part()

            return ok, comm_in_scope

        found = _dist.time_scopes(rank, scopes, prepare, graph, values["warmup"], values["calls"], values["iters"])
        if found is None:
            print("verify_step: allreduce check FAILED within a node or across the node leaders", file=sys.stderr)
            return 1
        scoped = found
    med = {name: _dist.summarize(samples) for name, samples in times.items()}
    verify_ms = med["full"]["median"] / 1000
    compute_ms = med["compute"]["median"] / 1000
    comm_ms = max(verify_ms - compute_ms, 0.0)
    isolated_ms = med["comm"]["median"] / 1000
    share = comm_ms / verify_ms if verify_ms > 0 else 0.0
    in_situ_us = comm_ms * 1000 / (2 * layers)
    if rank.rank == 0:
        spread: dict[str, Any] = {"p10_ms": med["full"]["p10"] / 1000, "p90_ms": med["full"]["p90"] / 1000}
        emit(M.VERIFY_TIME_MS, verify_ms, "ms", **spread, **world_tags)
        if tokens == 1:
            emit(M.DECODE_STEP_MS, verify_ms, "ms", **spread, **world_tags)
        emit(M.VERIFY_COMPUTE_MS, compute_ms, "ms", **world_tags)
        emit(M.VERIFY_COMM_MS, comm_ms, "ms", derived="verify_time - compute_only", **world_tags)
        emit(M.VERIFY_COMM_ISOLATED_MS, isolated_ms, "ms", **world_tags)
        emit(M.VERIFY_COMM_SHARE, share, "", **world_tags)
        emit(M.ALLREDUCE_IN_SITU_US, in_situ_us, "us", **world_tags)
        emit(M.ALLREDUCE_ISOLATED_US, isolated_ms * 1000 / (2 * layers), "us", **world_tags)
        lines = [("verify step", med["full"]), ("compute only", med["compute"]), ("allreduce only", med["comm"])]
        # The same allreduces alone within each node and among the leaders: the world's communication
        # split into what stays on a node and what crosses the fabric.
        for scope, samples in scoped:
            s = _dist.summarize(samples)
            scope_tags = {**tags, **scope.tags(topo)}
            emit(M.VERIFY_COMM_ISOLATED_MS, s["median"] / 1000, "ms", **scope_tags)
            emit(M.ALLREDUCE_ISOLATED_US, s["median"] / (2 * layers), "us", **scope_tags)
            where = f"node {topo.names[scope.node]}" if scope.node is not None else scope.name
            lines.append((f"allreduce only, {where}", s))
        width = max(16, *(len(label) for label, _ in lines))
        print(f"{'variant':<{width}} {'median_ms':>10} {'p10_ms':>9} {'p90_ms':>9}")
        for label, s in lines:
            print(f"{label:<{width}} {s['median'] / 1000:>10.3f} {s['p10'] / 1000:>9.3f} {s['p90'] / 1000:>9.3f}")
        print(
            f"communication in situ {comm_ms:.3f} ms = {share:.1%} of the verify step; "
            f"{in_situ_us:.1f} us per allreduce x {2 * layers}",
            flush=True,
        )
        if tokens == 1:
            print(f"decode step (1 token, {values['backend']}, {values['mode']}): {verify_ms:.3f} ms", flush=True)
    return 0


def _divisible(values: dict[str, Any], world: int) -> str | None:
    if values["hidden_size"] % world or values["ffn_size"] % world:
        return (
            f"hidden size {values['hidden_size']} and ffn size {values['ffn_size']} "
            f"must be divisible by the world size {world}"
        )
    return None


def main(argv: Sequence[str] | None = None) -> int:
    announce_import("torch")  # the page shows "importing torch" while it loads
    return _dist.recipe_main(
        PROG,
        __doc__,
        SPEC,
        argv,
        validate=validate,
        worker=worker,
        world_check=_divisible,
    )


if __name__ == "__main__":
    sys.exit(main())
