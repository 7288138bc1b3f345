"""A bare allreduce timing loop, the yardstick for the allreduce recipe's harness overhead.

No parameter handling, no correctness check, no metric lines: spawn one process per GPU, time
each variant the way the recipe does (CUDA events around each call, calls issued back to back;
a graph replay / 122 in graph mode; each sample the max over ranks) and print one JSON line per
(variant, tokens) with the median in us. Same sizes and counts as the recipe's defaults
(hidden 7168, bf16, 10 warm-up, 50 timed).

    python bench/bare_allreduce.py            # all visible GPUs
"""
import json
import os
import statistics
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HIDDEN, TOKENS, WARMUP, ITERS, GRAPH_N = 7168, (1, 4, 8, 64), 10, 50, 122
for var in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
    os.environ.setdefault(var, "0" if var == "NCCL_NVLS_ENABLE" else "1")


def _time(fn, reps: int) -> float:
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    torch.cuda.synchronize()
    dist.barrier()
    for i in range(reps):
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    samples = torch.tensor([s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends)], device="cuda")
    dist.all_reduce(samples, op=dist.ReduceOp.MAX)  # a collective is as slow as its slowest rank
    ordered = sorted(samples.tolist())
    pos = 0.1 * (len(ordered) - 1)  # p10, interpolated the way the recipe does
    lo = int(pos)
    p10 = ordered[lo] + (ordered[min(lo + 1, len(ordered) - 1)] - ordered[lo]) * (pos - lo)
    return statistics.median(ordered), p10


def worker(rank: int, world: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    group = dist.group.WORLD
    results = []
    for tokens in TOKENS:
        x = torch.randn(tokens, HIDDEN, device="cuda", dtype=torch.bfloat16)
        for _ in range(WARMUP):
            dist.all_reduce(x)
        results.append(("nccl_eager", tokens, *_time(lambda: dist.all_reduce(x), ITERS)))

        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                dist.all_reduce(x)
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(graph):
            for _ in range(GRAPH_N):
                dist.all_reduce(x)
        for _ in range(WARMUP):
            graph.replay()
        median, p10 = _time(graph.replay, ITERS)
        results.append(("nccl_graph", tokens, median / GRAPH_N, p10 / GRAPH_N))

        try:
            import torch.distributed._symmetric_memory as symm_mem

            t = symm_mem.empty((tokens, HIDDEN), dtype=torch.bfloat16, device="cuda")
            t.copy_(x)
            symm_mem.rendezvous(t, group.group_name)
            one = lambda: torch.ops.symm_mem.one_shot_all_reduce(t, "sum", group.group_name)  # noqa: E731
            two = lambda: torch.ops.symm_mem.two_shot_all_reduce_(t, "sum", group.group_name)  # noqa: E731
            for name, fn in (("symm_mem_two_shot", two), ("symm_mem_one_shot", one)):
                for _ in range(WARMUP):
                    fn()
                results.append((name, tokens, *_time(fn, ITERS)))
        except Exception as exc:  # noqa: BLE001 - an unsupported stack is a result here, not a crash
            if rank == 0:
                print(json.dumps({"variant": "symm_mem", "tokens": tokens, "error": repr(exc)[:300]}), flush=True)
    if rank == 0:
        for variant, tokens, us, p10 in results:
            print(json.dumps({"variant": variant, "tokens": tokens, "bytes": tokens * HIDDEN * 2,
                              "world_size": world, "median_us": round(us, 2), "p10_us": round(p10, 2)}), flush=True)
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # teardown of NCCL communicators can hang; the numbers are out


if __name__ == "__main__":
    world = torch.cuda.device_count()
    if world < 2:
        sys.exit("needs at least 2 GPUs")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(world, port), nprocs=world, join=True)
