"""Timing of a recipe's samples, apart from any launcher or process group: the clocks (CUDA events, the
synchronized wall clock, perf_counter), the nccl-tests back-to-back and per-call methods, the one measuring loop
of the step recipes (`Sampling`: warm-up, CUDA graph capture, samples, the slowest rank's) and their check against
a reference (`check_reference`), sample statistics and the one headline line (`emit_summary`), and the short
profiled run (`profile_steps`). A `Place` is where the loop runs: a `_dist.Rank` of a world, or `Alone` on one
device. Standard library + torch only; torch is imported lazily.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from app.protocol.metrics import emit, emit_phase
from runners.recipes._params import Param

# Which clock times a GPU sample: CUDA events (the headline), or the host's wall clock with a
# synchronize at each mark (an independent check of the same figure; tag timer "wall-sync").
CLOCKS = ("events", "wall")
CLOCK = Param(
    "clock", "choice", "events", "GPU samples timed by CUDA events, or wall clock + synchronize", choices=CLOCKS
)


def sampling(*, seed: str, per: str = "", warmup: int = 3, calls: int = 3) -> tuple[Param, ...]:
    """The timing parameters every step recipe takes: warmup, iters (R), calls (K), the clock and the seed.
    per: what one sample is of ("variant": "untimed steps per variant"); seed: what the seed seeds."""
    each = f" per {per}" if per else ""
    return (
        Param("warmup", "int", warmup, f"untimed steps{each}", minimum=0),
        Param("iters", "int", 20, f"timed samples{each} (R)", minimum=1),
        Param("calls", "int", calls, "eager: steps back to back per sample (K)", minimum=1),
        CLOCK,
        Param("seed", "int", 0, seed, minimum=0),
    )


def torch_dtype(name: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile of an already sorted list (q in [0, 100])."""
    if not sorted_values:
        raise ValueError("no samples")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(samples_us: list[float]) -> dict[str, float]:
    s = sorted(samples_us)
    return {"median": percentile(s, 50), "p10": percentile(s, 10), "p90": percentile(s, 90), "min": s[0], "max": s[-1]}


SPREAD = ("p10", "p90", "min", "max")


def emit_summary(
    name: str, samples: list[float], unit: str, *, spread: tuple[str, ...] = SPREAD, **tags: Any
) -> dict[str, float]:
    """One headline metric line: the median of `samples`, its spread as tags (`p10_<unit>`, `p90_`, `min_`,
    `max_`; `spread` names which) and the samples themselves. Returns the summary."""
    stats = summarize(samples)
    line: dict[str, Any] = {f"{k}_{unit}": stats[k] for k in spread} | tags
    emit(name, stats["median"], unit, samples=samples, **line)
    return stats


class PerfCounterTimer:
    """Host wall clock (CPU ranks: gloo collectives return when they are done)."""

    name = "perf_counter"

    def mark(self) -> float:
        return time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_us(self, start: float, end: float) -> float:
        return (end - start) * 1e6


class SyncWallTimer(PerfCounterTimer):
    """The host's wall clock, the device synchronized at each mark: independent of CUDA events (it
    adds one synchronize per mark, so it reads a little high on short samples)."""

    name = "wall-sync"

    def __init__(self, device):
        self.device = device

    def mark(self) -> float:
        import torch

        torch.cuda.synchronize(self.device)
        return time.perf_counter()


class CudaEventTimer:
    """CUDA events recorded on the current stream; read after one synchronize."""

    name = "cuda-events"

    def __init__(self, device):
        self.device = device

    def mark(self):
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize(self.device)

    def elapsed_us(self, start, end) -> float:
        return start.elapsed_time(end) * 1000.0


def device_timer(device, clock: str = "events"):
    """The timer of a device: CUDA events (or the synchronized wall clock, clock "wall") on a GPU,
    perf_counter on the CPU."""
    if device.type != "cuda":
        return PerfCounterTimer()
    return SyncWallTimer(device) if clock == "wall" else CudaEventTimer(device)


def time_back_to_back(fn: Callable[[], Any], timer, calls: int, samples: int) -> list[float]:
    """The nccl-tests method: per sample, `calls` calls issued back to back between two marks,
    elapsed / calls (us). No synchronize between samples, so the queue stays full and a per-launch
    cost shows only where it really bounds the rate of calls."""
    marks = []
    for _ in range(samples):
        start = timer.mark()
        for _ in range(calls):
            fn()
        marks.append((start, timer.mark()))
    timer.synchronize()
    return [timer.elapsed_us(start, end) / calls for start, end in marks]


def time_per_call(fn: Callable[[], Any], timer, iters: int) -> list[float]:
    """A mark pair around each call (us). The marks sit in the launch path: on a GPU this
    inflates eager collectives, so it is never a headline (allreduce_per_call_us only); for a
    graph replay of N calls (us per replay) the marks are amortised over N."""
    marks = []
    for _ in range(iters):
        start = timer.mark()
        fn()
        marks.append((start, timer.mark()))
    timer.synchronize()
    return [timer.elapsed_us(start, end) for start, end in marks]


class Place(Protocol):
    """Where a step is measured: this rank of a world (`_dist.Rank`), or one process alone (`Alone`)."""

    device: Any
    rank: int

    def synchronize(self) -> None: ...

    def barrier(self) -> None: ...

    def max_across(self, values: list[float]) -> list[float]: ...

    def all_true(self, flag: bool) -> bool: ...


class Alone:
    """One process on one device, no world: nothing to wait for, its samples are the slowest."""

    rank = 0

    def __init__(self, device):
        self.device = device

    def synchronize(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        pass

    def max_across(self, values: list[float]) -> list[float]:
        return values

    def all_true(self, flag: bool) -> bool:
        return flag


def capture_graph(place: Place, body: Callable[[], Any]):
    """Capture `body` in a CUDA graph (after a warm-up on a side stream, as capture requires)."""
    import torch

    side = torch.cuda.Stream(device=place.device)
    side.wait_stream(torch.cuda.current_stream(place.device))
    with torch.cuda.stream(side):
        body()
    torch.cuda.current_stream(place.device).wait_stream(side)
    torch.cuda.synchronize(place.device)
    place.barrier()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    torch.cuda.synchronize(place.device)
    return graph


def warm(place: Place, fn: Callable[[], Any], warmup: int) -> None:
    """Untimed calls, then every rank lines up before timing starts."""
    for _ in range(warmup):
        fn()
    place.synchronize()
    place.barrier()


@dataclass(frozen=True)
class Sampling:
    """The one measuring loop of the step recipes: `warmup` untimed calls, then `iters` samples, each `calls`
    steps back to back between two marks / calls (eager, method "nccl-tests") or one replay of the step
    captured in a CUDA graph (method "graph-replay"); marks by `clock` (CUDA events, or the wall clock after a
    synchronize) on a GPU, perf_counter on the CPU. Samples in us, the slowest rank's."""

    graph: bool
    warmup: int
    calls: int
    iters: int
    clock: str = "events"

    @classmethod
    def of(cls, values: dict[str, Any], *, clock: bool = True) -> Sampling:
        """From a recipe's validated mode, warmup, calls, iters and clock (`clock` False: it has none)."""
        return cls(
            values["mode"] == "graph",
            values["warmup"],
            values["calls"],
            values["iters"],
            values["clock"] if clock else "events",
        )

    @property
    def method(self) -> str:
        return "graph-replay" if self.graph else "nccl-tests"

    def timer(self, place: Place):
        return device_timer(place.device, self.clock)

    def tags(self, place: Place) -> dict[str, Any]:
        """How a figure was timed, as its line's tags."""
        return {
            "timer": self.timer(place).name,
            "method": self.method,
            "sample_count": self.iters,
            "calls_per_sample": 1 if self.graph else self.calls,
        }

    def samples(self, place: Place, body: Callable[[], Any]) -> list[float]:
        """`iters` samples of `body` (us per call eager, us per replay in a graph), the slowest rank's each."""
        timer = self.timer(place)
        if self.graph:
            captured = capture_graph(place, body)
            warm(place, captured.replay, self.warmup)
            samples = time_per_call(captured.replay, timer, self.iters)
            del captured
        else:
            warm(place, body, self.warmup)
            samples = time_back_to_back(body, timer, self.calls, self.iters)
        return place.max_across(samples)

    def profiled(self, place: Place, label: str, body: Callable[[], Any]) -> None:
        """The short profiled run of `body` (a graph replay of it in graph mode); rank 0 writes the trace."""
        step = capture_graph(place, body).replay if self.graph else body
        on_gpu = place.device.type == "cuda"
        profile_steps(label, step, cuda=on_gpu, synchronize=place.synchronize, record=place.rank == 0)
        place.barrier()


# A step's relative error (Frobenius) against its float32 reference, at most, by the step's dtype.
REFERENCE_LIMIT = {"bf16": 5e-2, "fp16": 1e-2, "fp32": 1e-4}


def check_reference(place: Place, who: str, out, reference: Callable[[], Any], limit: float, against: str) -> bool:
    """The step's output `out` (float32, on the CPU) against `reference()`, computed on rank 0 only: finite
    and within `limit` relative error. Rank 0 prints the verdict; True on every rank when it passed."""
    import torch

    place.synchronize()
    ok = True
    if place.rank == 0:
        ref = reference().cpu()
        rel = float((out - ref).norm() / ref.norm())
        ok = rel <= limit and bool(torch.isfinite(out).all())
        print(
            f"{who}: correctness {'ok' if ok else 'FAILED'} vs {against} (relative error {rel:.3g}, limit {limit:g})",
            flush=True,
        )
    return place.all_true(ok)


PROFILE_STEPS = 3
ARTIFACTS_ENV = "CAMPAIGN_ARTIFACTS_DIR"  # runners/artifacts.py sets it for every trial


def profile_steps(
    label: str, body: Callable[[], Any], *, cuda: bool, synchronize: Callable[[], None], record: bool = True
) -> str | None:
    """A short profiled run of `body` after the timed ones, never a timing sample: PROFILE_STEPS calls, each in
    a `record_function(label)` span (the board counts a step per span), written as a torch.profiler Chrome
    trace `<label>.trace.json` into $CAMPAIGN_ARTIFACTS_DIR (else the working directory). With `record` False
    (the other ranks of a world) the same calls run unprofiled, so every rank takes part in the collectives.
    Returns the trace's path (None when not recorded)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    emit_phase(f"profiling {label} ({PROFILE_STEPS} steps, not timed)")
    if not record:
        for _ in range(PROFILE_STEPS):
            body()
            synchronize()
        return None
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(PROFILE_STEPS):
            with record_function(label):
                body()
                synchronize()
    out = os.path.join(os.environ.get(ARTIFACTS_ENV) or os.getcwd(), f"{label}.trace.json")
    prof.export_chrome_trace(out)
    print(f"{label}: profiled {PROFILE_STEPS} steps (not timed) into {out}", flush=True)
    return out
