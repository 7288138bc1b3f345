"""One Kimi-K2.5 MoE layer's routed experts, per kernel and dtype, on one GPU (issue 44): the time of the
experts' part of a layer (gather, gate-up, SwiGLU, down, gate scale, combine) in a CUDA graph, the grouped
kernels against the per-expert loop, and each against its memory floor (the touched experts' bytes over the
copy bandwidth measured here). Also the distinct experts balanced routing touches against the expectation.

    python bench/moe_kernels.py [--tokens 1,4,16,64] [--plans 8] [--iters 20]

Each timed graph replays `--plans` layers' worth of different balanced routings over one bank of 384 experts
(each plan reads other experts: the weights stream from HBM, not the L2); the figure is the replay over plans.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runners.recipes import moe_step as ms

HID, FFN, EXPERTS, TOP_K = 7168, 2048, 384, 8


def copy_bw(torch) -> float:
    n = 2 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    del src, dst
    return 2 * n / (statistics.median(times) * 1e-3) / 1e9


def time_layers(torch, bank, kernel: str, plans, h, g, out, iters: int) -> list[float]:
    """Microseconds per layer of each graph replay over the plans (one layer's experts per plan)."""

    def layer(plan):
        if kernel == "grouped":
            y = bank.grouped(h.index_select(0, plan.rows), plan) * g[plan.flat].unsqueeze(1)
            out.index_add_(0, plan.rows, y)
        else:
            for e, r, f in plan.experts:
                out.index_add_(0, r, bank.run(e, h.index_select(0, r)) * g[f].unsqueeze(1))

    def body():
        for plan in plans:
            layer(plan)

    body()  # autotune / warm
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        body()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    for _ in range(3):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / len(plans))
    return times


def main() -> int:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="1,4,16,64,1024")
    ap.add_argument("--plans", type=int, default=8)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--dtypes", default="bf16,fp8,int4")
    args = ap.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    dev = torch.device("cuda")
    print(f"# {torch.cuda.get_device_name(dev)}, torch {torch.__version__}", flush=True)
    bw = copy_bw(torch)
    print(f"# copy bandwidth {bw:.0f} GB/s (read + write)", flush=True)
    print("# balanced routing: distinct experts touched per layer vs 384 x (1 - (1 - 8/384)^T)")
    for t in (1, 4, 16, 64, 128, 256, 512, 1024):
        got = [
            ms.make_plan(ms.balanced_topk(t, EXPERTS, TOP_K, s), list(range(EXPERTS)), 1, "cpu").touched
            for s in range(16)
        ]
        want = ms.expected_touched(EXPERTS, TOP_K, t)
        print(
            f"T={t:5d} touched mean {statistics.mean(got):7.2f} (min {min(got)}, max {max(got)}) expected {want:7.2f}"
            f" ({statistics.mean(got) / want - 1:+.2%})",
            flush=True,
        )
    rows = []
    for dtype in args.dtypes.split(","):
        for name in ("grouped", "loop"):
            kernel = name
            t0 = time.time()
            refusal = ms.probe_experts_dtype(dtype, dev, torch.bfloat16, True, kernel, 32)
            if refusal:
                print(f"{dtype} {kernel}: REFUSED: {refusal}", flush=True)
                continue
            bank = ms.ExpertBank(dtype, torch.bfloat16, dev, EXPERTS, HID, FFN, True, kernel, 32)
            gen = torch.Generator(device=dev).manual_seed(1)
            for e in range(EXPERTS):
                gu = torch.randn(HID, 2 * FFN, generator=gen, device=dev) / HID**0.5
                down = torch.randn(FFN, HID, generator=gen, device=dev) / FFN**0.5
                bank.put(e, gu, down)
            torch.cuda.synchronize()
            per_expert = bank.bytes_per_expert(HID)
            print(
                f"# {dtype} {name}: bank built in {time.time() - t0:.0f} s, {per_expert / 1e6:.1f} MB per expert",
                flush=True,
            )
            pad = 16 if dtype == "fp8" else 1
            for t in tokens:
                plans = [
                    ms.make_plan(
                        ms.balanced_topk(t, EXPERTS, TOP_K, 1000 * t + p),
                        list(range(EXPERTS)),
                        pad,
                        dev,
                        kernel == "grouped",
                    )
                    for p in range(args.plans)
                ]
                h = torch.randn(t, HID, device=dev, dtype=torch.bfloat16)
                g = torch.rand(t * TOP_K + 1, device=dev, dtype=torch.bfloat16)
                out = torch.zeros(t, HID, device=dev, dtype=torch.bfloat16)

                times = time_layers(torch, bank, kernel, plans, h, g, out, args.iters)
                us = statistics.median(times)
                touched = statistics.mean(p.touched for p in plans)
                floor = touched * per_expert / (bw * 1e9) * 1e6
                rows.append((dtype, name, t, touched, us, floor, us / touched))
                print(
                    f"{dtype:5s} {name:16s} T={t:4d} touched {touched:6.1f} layer {us:8.1f} us "
                    f"({us / touched:5.1f} us/expert) floor {floor:8.1f} us  {floor / us:6.1%} of floor "
                    f"[p10 {sorted(times)[len(times) // 10]:.1f} p90 {sorted(times)[len(times) * 9 // 10]:.1f}]",
                    flush=True,
                )
            del bank
            torch.cuda.empty_cache()
    print("\ndtype kernel T touched layer_us us_per_expert floor_us frac_of_floor")
    for dtype, kernel, t, touched, us, floor, per in rows:
        print(f"{dtype} {kernel} {t} {touched:.1f} {us:.1f} {per:.1f} {floor:.1f} {floor / us:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
