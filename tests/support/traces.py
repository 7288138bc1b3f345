"""Profiler traces for tests: a Kineto-shaped CUDA trace with known kernels."""

from __future__ import annotations

import json
from pathlib import Path


def cuda_trace(path: Path, kernels: list[tuple[str, float]], steps: int = 2, lag_us: float = 500.0) -> Path:
    """A Kineto-shaped trace: per step a host annotation, one launch per kernel (cuda_runtime, correlation id)
    and the kernel on the GPU `lag_us` later (past the step's host window for the last ones); plus a warm-up
    kernel before the first step."""
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}]
    corr = 100
    events.append(
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 2,
            "args": {"correlation": corr},
        }
    )
    events.append(
        {
            "ph": "X",
            "cat": "kernel",
            "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
            "pid": 0,
            "tid": 7,
            "ts": 5,
            "dur": 999,
            "args": {"correlation": corr},
        }
    )
    t = 1000.0
    for _ in range(steps):
        events.append(
            {"ph": "X", "cat": "user_annotation", "name": "verify_step", "pid": 1, "tid": 1, "ts": t, "dur": 100}
        )
        for i, (name, dur) in enumerate(kernels):
            corr += 1
            launch = t + 1 + i * (98 / len(kernels))
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 1,
                    "tid": 1,
                    "ts": launch,
                    "dur": 1,
                    "args": {"correlation": corr},
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": name,
                    "pid": 0,
                    "tid": 7,
                    "ts": launch + lag_us,
                    "dur": dur,
                    "args": {"correlation": corr},
                }
            )
        t += 2000
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path
