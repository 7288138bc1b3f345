"""A bare allreduce timing loop, the yardstick for the allreduce recipe's harness and method.

Independent of the recipe's code on purpose (no runners.recipes import): no parameter handling
beyond argparse, no correctness check, no metric lines. It spawns one process per rank, and for
each variant (backend:mode) and size times the same calls by two methods that are NOT the
recipe's headline method (nccl-tests, K calls back to back between two CUDA events / K):

  per-call-events  one CUDA event pair around each call (a graph: around each replay / N)
  wall-clock       torch.cuda.synchronize(); perf_counter around K calls (replays); synchronize; / K (x N)

On gloo (CPU) there are no events: per-call-events is perf_counter around each call. Each sample is
the max over ranks. One JSON line per (variant, tokens, method) with median_us and p10_us.

    python bench/bare_allreduce.py                                      # nccl + symm-mem, eager + graph
    python bench/bare_allreduce.py --variants gloo:eager --world-size 2 --hidden 256 --tokens 1,4
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time

for var, value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(var, value)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

METHODS = ("per-call-events", "wall-clock")
GPU_VARIANTS = (
    "nccl:eager",
    "nccl:graph",
    "symm_mem_two_shot:eager",
    "symm_mem_two_shot:graph",
    "symm_mem_one_shot:eager",
    "symm_mem_one_shot:graph",
)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def p10(values: list[float]) -> float:
    ordered = sorted(values)
    pos = 0.1 * (len(ordered) - 1)
    lo = int(pos)
    return ordered[lo] + (ordered[min(lo + 1, len(ordered) - 1)] - ordered[lo]) * (pos - lo)


def slowest(samples: list[float], device) -> list[float]:
    t = torch.tensor(samples, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # a collective is as slow as its slowest rank
    return t.cpu().tolist()


def per_call(fn, iters: int, on_gpu: bool) -> list[float]:
    if not on_gpu:
        out = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e6)
        return out
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for start, end in pairs:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) * 1000.0 for start, end in pairs]


def wall_clock(fn, iters: int, calls: int, on_gpu: bool) -> list[float]:
    out = []
    for _ in range(iters):
        if on_gpu:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        if on_gpu:
            torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e6 / calls)
    return out


def make_call(backend: str, x, group_name: str):
    if backend == "symm_mem_one_shot":
        return lambda: torch.ops.symm_mem.one_shot_all_reduce(x, "sum", group_name)
    if backend == "symm_mem_two_shot":
        return lambda: torch.ops.symm_mem.two_shot_all_reduce_(x, "sum", group_name)
    return lambda: dist.all_reduce(x)


def worker(rank: int, world: int, port: int, args: argparse.Namespace) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    on_gpu = any(not v.startswith("gloo") for v in args.variants)
    if on_gpu:
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=world)
    world_group = dist.group.WORLD
    if world_group is None:  # init_process_group above sets it
        raise RuntimeError("torch.distributed has no WORLD group after init_process_group")
    group_name = world_group.group_name
    dtype = DTYPES[args.dtype]
    for variant in args.variants:
        backend, mode = variant.split(":")
        for tokens in args.tokens:
            try:
                if backend.startswith("symm_mem"):
                    import torch.distributed._symmetric_memory as symm_mem

                    x = symm_mem.empty((tokens, args.hidden), dtype=dtype, device=device)
                    symm_mem.rendezvous(x, group_name)
                else:
                    x = torch.empty((tokens, args.hidden), dtype=dtype, device=device)
                x.normal_()
                call = make_call(backend, x, group_name)
                for _ in range(args.warmup):
                    call()
                scale = 1
                fn = call
                if mode == "graph":
                    side = torch.cuda.Stream()
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        for _ in range(3):
                            call()
                    torch.cuda.current_stream().wait_stream(side)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        for _ in range(args.graph_n):
                            call()
                    for _ in range(args.warmup):
                        graph.replay()
                    fn, scale = graph.replay, args.graph_n
                if on_gpu:
                    torch.cuda.synchronize()
                dist.barrier()
                results = {"per-call-events": per_call(fn, args.iters, on_gpu)}
                dist.barrier()
                results["wall-clock"] = wall_clock(fn, args.iters, max(1, args.calls // scale), on_gpu)
                for method in METHODS:
                    samples = [s / scale for s in slowest(results[method], device)]
                    if rank == 0:
                        print(
                            json.dumps(
                                {
                                    "variant": variant,
                                    "backend": backend,
                                    "mode": mode,
                                    "method": method,
                                    "tokens": tokens,
                                    "bytes": x.numel() * x.element_size(),
                                    "world_size": world,
                                    "median_us": round(statistics.median(samples), 3),
                                    "p10_us": round(p10(samples), 3),
                                }
                            ),
                            flush=True,
                        )
            except Exception as exc:
                if rank == 0:
                    print(json.dumps({"variant": variant, "tokens": tokens, "error": repr(exc)[:300]}), flush=True)
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # teardown of NCCL communicators can hang; the numbers are out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default=",".join(GPU_VARIANTS), help="backend:mode,... (gloo:eager on CPU)")
    ap.add_argument("--tokens", default="1,4,8,64")
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--dtype", default="bf16", choices=tuple(DTYPES))
    ap.add_argument("--world-size", type=int, default=None, help="default: all visible GPUs (gloo: 2)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=20, help="samples per method")
    ap.add_argument("--calls", type=int, default=100, help="wall-clock: calls per sample (graph: / N replays)")
    ap.add_argument("--graph-n", type=int, default=122)
    args = ap.parse_args()
    args.variants = [v for v in args.variants.split(",") if v]
    args.tokens = [int(t) for t in args.tokens.split(",")]
    for variant in args.variants:
        backend, _, mode = variant.partition(":")
        if mode not in ("eager", "graph") or (backend == "gloo" and mode == "graph"):
            ap.error(f"variant {variant!r}: expected backend:eager or backend:graph (gloo: eager only)")
    gpu = any(not v.startswith("gloo") for v in args.variants)
    if gpu and any(v.startswith("gloo") for v in args.variants):
        ap.error("gloo variants and GPU variants cannot share one run")
    world = args.world_size or (torch.cuda.device_count() if gpu else 2)
    if world < 2:
        ap.error(f"needs at least 2 ranks; {world} available")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(world, port, args), nprocs=world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
