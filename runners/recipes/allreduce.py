"""Allreduce latency over the message sizes of a decode/verify step.

    python -m runners.recipes.allreduce --backend gloo --world-size 2 --tokens 1,4 --hidden-size 1024
    python -m runners.recipes.allreduce --backend nccl --mode graph --tokens 1,4,8,64

Message size = tokens x hidden x element size (4 draft tokens x 7168 x bf16 = 56 KiB).
Each size: correctness check against a known sum, warm-up, then R timed samples (`--iters`);
reports the median and p10/p90/min/max over samples, algbw = bytes / time and
busbw = algbw x 2(n-1)/n (nccl-tests convention) as metric lines, then a table.
Eager (method "nccl-tests"): a sample is `--calls` allreduces back to back between two marks
(CUDA events; perf_counter on CPU), divided by the count. Graph (method "graph-replay"): a
sample is one replay of a CUDA graph of `--graph-allreduces` (default 122: one verify step of a
61-layer model) allreduces, divided by N. Eager also reports per-call event timing as the
separate metric allreduce_per_call_us (`--per-call-iters`, 0 = off); it is never the headline.
A world spanning nodes (started by srun) also measures, by the same method, each node's ranks
(tag scope "node") and the node leaders (scope "cross-node") beside the world (scope "world"):
see docs/recipes.md, "Across nodes".
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from app.protocol.metrics import MetricName as M
from app.protocol.metrics import emit
from runners.recipes import _dist, _params, _timing
from runners.recipes._loading import announce_import
from runners.recipes._params import Param, module_recipe
from runners.recipes._params import validate as _validate

PROG = "runners.recipes.allreduce"
PROFILE_LABEL = "allreduce"  # the profiled step's record_function name and the trace's file name

SPEC = (
    Param("backend", "choice", "gloo", "allreduce implementation", choices=_dist.BACKENDS),
    Param("mode", "choice", "eager", "eager calls, or N calls captured in one CUDA graph", choices=_dist.MODES),
    _dist.WORLD_SIZE,
    Param("hidden_size", "int", 7168, "model hidden size (elements per token)", minimum=1),
    Param("tokens", "int_list", [1, 4, 8, 64], "tokens per message (comma-separated)", minimum=1),
    Param("dtype", "choice", "bf16", "element type", choices=tuple(_dist.DTYPE_BYTES)),
    Param("graph_allreduces", "int", 122, "allreduces captured per CUDA graph (graph mode)", minimum=1),
    Param("warmup", "int", 10, "untimed calls (or replays) per size", minimum=0),
    Param("iters", "int", 20, "timed samples per size (R): the median and spread are over these", minimum=1),
    Param("calls", "int", 100, "eager: allreduces back to back per sample (K, the nccl-tests method)", minimum=1),
    Param("per_call_iters", "int", 50, "eager: calls timed one by one for allreduce_per_call_us (0 = off)", minimum=0),
    Param("seed", "int", 0, "seed of the known values used by the correctness check", minimum=0),
    Param("profile", "bool", False, "after the timing, profile 3 steps of the first size into a Chrome trace"),
    *_dist.TIMEOUTS,
)


def validate(params: dict[str, Any]) -> dict[str, Any]:
    """Validated params with defaults (raises RecipeError naming the parameter)."""
    values = _validate(params, SPEC)
    _dist.static_checks(values)
    return values


RECIPE = module_recipe(PROG, SPEC, validate)


GEOMETRY = ("hidden_size",)


def _emit_figures(
    samples: list[float], nbytes: int, ranks: int, timing: dict[str, Any], tags: dict[str, Any]
) -> tuple[float, float, dict[str, float]]:
    """The latency headline (with its R samples) and its bandwidths (busbw = algbw x 2(n-1)/n over the n
    ranks in the allreduce)."""
    stats = _timing.emit_summary(M.ALLREDUCE_LATENCY_US, samples, "us", **timing, **tags)
    algbw = nbytes / (stats["median"] * 1e-6) / 1e9
    busbw = algbw * (2 * (ranks - 1) / ranks)
    emit(M.ALLREDUCE_ALGBW_GBPS, algbw, "GB/s", method=timing["method"], **tags)
    emit(M.ALLREDUCE_BUSBW_GBPS, busbw, "GB/s", method=timing["method"], **tags)
    return algbw, busbw, stats


def _measure(rank: _dist.Rank, values: dict[str, Any]) -> int:
    if _dist.refused_across_nodes(rank, PROG):
        return 2
    sampling = _timing.Sampling.of(values, clock=False)
    tags = _base_tags(rank, values, sampling)
    _log_start(rank, values, sampling)
    rows: list[tuple] = []
    for tokens in values["tokens"]:
        found = _measure_size(rank, values, sampling, tags, tokens)
        if found is None:
            return 1
        rows += found
    if rank.rank == 0:
        _print_table(rows, values, sampling.graph)
    if values["profile"]:
        _profile(rank, values, sampling)
    return 0


def _base_tags(rank: _dist.Rank, values: dict[str, Any], sampling: _timing.Sampling) -> dict[str, Any]:
    """The conditions every line of the run carries (a multi-node world's also say where it spans)."""
    tags = {
        "backend": values["backend"],
        "mode": values["mode"],
        "world_size": rank.world_size,
        "dtype": values["dtype"],
        "hidden_size": values["hidden_size"],
        "scaled": _params.scaled(values, SPEC, GEOMETRY),
        "timer": sampling.timer(rank).name,
        **_dist.knob_tags(),
        **_dist.stack_tags(rank),
    }
    if sampling.graph:
        tags["graph_allreduces"] = values["graph_allreduces"]
    if rank.topology.nodes > 1:
        # Single-node trials keep their tags as they were; a multi-node world says where each figure is from.
        tags.update(rank.topology.tags())
    return tags


def _log_start(rank: _dist.Rank, values: dict[str, Any], sampling: _timing.Sampling) -> None:
    topo = rank.topology
    rank.log(
        f"allreduce: backend={values['backend']} mode={values['mode']} world_size={rank.world_size} "
        f"dtype={values['dtype']} hidden={values['hidden_size']} device={rank.device.type} "
        f"method={sampling.method} timer={sampling.timer(rank).name}"
    )
    if topo.nodes > 1:
        rank.log(
            f"allreduce: {topo.nodes} nodes x {topo.ranks_per_node} ranks (nodes from the {topo.source}: "
            + ", ".join(f"{name}: ranks {topo.members(i)}" for i, name in enumerate(topo.names))
            + "); scopes: "
            + ", ".join(dict.fromkeys(s.name for s in rank.scopes()))
        )


def _measure_size(
    rank: _dist.Rank, values: dict[str, Any], sampling: _timing.Sampling, base_tags: dict[str, Any], tokens: int
) -> list[tuple] | None:
    """One message size: the check, the world's samples (and per-call ones), each scope's in a multi-node
    world; rank 0 emits the lines. Returns the size's rows of the table (rank 0's), None when a check failed."""
    topo = rank.topology
    multi = topo.nodes > 1
    scopes = rank.scopes()
    shape = (tokens, values["hidden_size"])
    nbytes = tokens * values["hidden_size"] * _dist.DTYPE_BYTES[values["dtype"]]
    tags = {**base_tags, "tokens": tokens, "bytes": nbytes}
    world_tags = {**tags, **scopes[0].tags(topo)} if multi else tags
    rank.phase(f"measuring {tokens} token{'s' if tokens != 1 else ''} ({nbytes} B)")
    ar = _dist.Allreduce(rank, shape, values["dtype"])
    if not _checked(rank, ar, values, tokens, nbytes, world_tags):
        return None
    per = values["graph_allreduces"] if sampling.graph else 1
    samples = [t / per for t in sampling.samples(rank, _body(ar, values, sampling.graph))]
    calls = per if sampling.graph else values["calls"]
    timing = {"method": sampling.method, "sample_count": values["iters"], "calls_per_sample": calls}
    per_call: list[float] = []
    if not sampling.graph and values["per_call_iters"]:
        rank.barrier()
        per_call = rank.max_across(_timing.time_per_call(ar, sampling.timer(rank), values["per_call_iters"]))
    del ar
    scoped: list[tuple[_dist.Scope, list[float]]] = []
    if multi:
        rank.phase(f"measuring {tokens} token{'s' if tokens != 1 else ''} within each node, then across nodes")
        found = _dist.time_scopes(rank, scopes, lambda view: _prepared(view, shape, values, sampling.graph), sampling)
        if found is None:
            print(
                f"allreduce: CORRECTNESS FAILED within a node or across the node leaders, tokens={tokens}",
                file=sys.stderr,
                flush=True,
            )
            return None
        scoped = list(found)
    if rank.rank != 0:
        return []
    return _emit_size(samples, per_call, scoped, nbytes, rank.world_size, timing, tags, world_tags, topo)


def _checked(
    rank: _dist.Rank, ar: _dist.Allreduce, values: dict[str, Any], tokens: int, nbytes: int, tags: dict[str, Any]
) -> bool:
    """The world's allreduce against a known sum, said on every rank that failed and by rank 0's line."""
    ok, err, tol = _dist.check_allreduce(ar, values["seed"], values["dtype"])
    if not ok:
        print(
            f"allreduce: CORRECTNESS FAILED rank {rank.rank} tokens={tokens}: "
            f"max abs error {err:.3g} > tolerance {tol:.3g}",
            file=sys.stderr,
            flush=True,
        )
        return False
    rank.log(f"allreduce: correctness ok tokens={tokens} bytes={nbytes} (max abs error {err:.3g}, tolerance {tol:.3g})")
    if rank.rank == 0:
        emit(M.ALLREDUCE_CHECK_PASSED, 1, "", max_abs_error=err, **tags)
    return True


def _emit_size(samples, per_call, scoped, nbytes, ranks, timing, tags, world_tags, topo) -> list[tuple]:
    """Rank 0's lines of one size (the world's, its per-call figure, each scope's); returns its table rows."""
    algbw, busbw, stats = _emit_figures(samples, nbytes, ranks, timing, world_tags)
    if per_call:
        _timing.emit_summary(
            M.ALLREDUCE_PER_CALL_US, per_call, "us", method="per-call-events", sample_count=len(per_call), **world_tags
        )
    label = "world" if topo.nodes > 1 else None
    tokens = tags["tokens"]
    per_call_median = _timing.summarize(per_call)["median"] if per_call else None
    rows = [(label, tokens, nbytes, stats, algbw, busbw, per_call_median)]
    for scope, scope_samples in scoped:
        alg, bus, s = _emit_figures(scope_samples, nbytes, len(scope.members), timing, {**tags, **scope.tags(topo)})
        where = f"node {topo.names[scope.node]}" if scope.node is not None else scope.name
        rows.append((where, tokens, nbytes, s, alg, bus, None))
    return rows


def _profile(rank: _dist.Rank, values: dict[str, Any], sampling: _timing.Sampling) -> None:
    """The short profiled run of the first size on the whole world (never a timing sample): a step is one
    call eager, one replay of graph_allreduces calls in graph mode; rank 0 writes allreduce.trace.json."""
    shape = (values["tokens"][0], values["hidden_size"])
    ok, body = _prepared(rank, shape, values, sampling.graph)
    if not rank.all_true(ok):
        print("allreduce: CORRECTNESS FAILED before profiling; no trace", file=sys.stderr, flush=True)
        return
    sampling.profiled(rank, PROFILE_LABEL, body)


def _body(ar: _dist.Allreduce, values: dict[str, Any], graph: bool):
    """What one sample times: one allreduce eager (called `calls` times), graph_allreduces of them in a graph."""
    return _dist.repeated(ar, values["graph_allreduces"]) if graph else ar


def _prepared(view: _dist.Rank, shape: tuple[int, ...], values: dict[str, Any], graph: bool):
    """The body timed on a node or leaders scope, after the same correctness check as the world's."""
    ar = _dist.Allreduce(view, shape, values["dtype"])
    ok, _, _ = _dist.check_allreduce(ar, values["seed"], values["dtype"])
    return ok, _body(ar, values, graph)


def _print_table(rows: list[tuple], values: dict[str, Any], graph: bool) -> None:
    scoped = any(row[0] for row in rows)
    head = f"{'scope':<22} " if scoped else ""
    print(
        f"{head}{'tokens':>7} {'bytes':>10} {'median_us':>10} {'p10_us':>9} {'p90_us':>9} "
        f"{'min_us':>9} {'max_us':>9} {'algbw_GB/s':>11} {'busbw_GB/s':>11} {'per_call_us':>12}"
    )
    for label, tokens, nbytes, s, algbw, busbw, pc_med in rows:
        pc_text = f"{pc_med:>12.2f}" if pc_med is not None else f"{'-':>12}"
        lead = f"{label:<22} " if scoped else ""
        print(
            f"{lead}{tokens:>7} {nbytes:>10} {s['median']:>10.2f} {s['p10']:>9.2f} {s['p90']:>9.2f} "
            f"{s['min']:>9.2f} {s['max']:>9.2f} {algbw:>11.3f} {busbw:>11.3f} {pc_text}",
            flush=True,
        )
    print(
        "median_us: "
        + (
            "one graph replay / N"
            if graph
            else f"{values['calls']} calls back to back / {values['calls']} (nccl-tests method)"
        )
        + f", over {values['iters']} samples, slowest rank; per_call_us: one event pair per call",
        flush=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    announce_import("torch")  # the page shows "importing torch" while it loads
    return _dist.recipe_main(PROG, __doc__, SPEC, argv, validate=_dist.static_checks, measure=_measure)


if __name__ == "__main__":
    sys.exit(main())
