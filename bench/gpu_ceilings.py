"""The two ceilings of the GPU this runs on, measured (METHOD.md: datasheet rates are leads):
device-memory bandwidth (a large device-to-device copy, bytes read + written) and the dense bf16
matrix rate (a large product on random data). Medians over CUDA-event-timed repeats.

    python bench/gpu_ceilings.py            # prints one line per ceiling
"""

from __future__ import annotations

import statistics

import torch


def timed_ms(fn, reps: int = 20) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    n = 4 << 30  # 4 GiB of bf16 per buffer: far past the L2
    src = torch.randn(n // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = timed_ms(lambda: dst.copy_(src))
    print(f"copy bandwidth: {2 * n / (ms * 1e-3) / 1e12:.2f} TB/s (read + write of {n / 2**30:.0f} GiB, {ms:.3f} ms)")
    src.resize_(0), dst.resize_(0)  # free the 8 GiB before the product
    torch.cuda.empty_cache()
    m = 8192
    a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    ms = timed_ms(lambda: a @ b)
    print(f"bf16 matmul: {2 * m**3 / (ms * 1e-3) / 1e12:.0f} TFLOP/s ({m}^3, {ms:.3f} ms)")


if __name__ == "__main__":
    main()
