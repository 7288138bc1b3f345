"""Profiler traces: a Chrome / Kineto trace (torch.profiler's `export_chrome_trace`, an SGLang server's
profile, any Kineto JSON) read into a kernel table per step, with the collectives recognised, and the model
inputs it gives: allreduces per step (N_ar) and the in-situ allreduce time (t_ar).

The trace is streamed (ijson: one event at a time, nothing but the aggregates kept), so a 200 MB trace is
read in bounded memory; callers run `read_trace` off the event loop.

What is counted:
- Device work: events of category `kernel` (and `gpu_memcpy` / `gpu_memset`). A kernel belongs to the step
  whose host-side window holds its launch (`cuda_runtime` / `cuda_driver` events, matched by
  `args.correlation`), so the GPU's lag behind the CPU does not move kernels between steps.
- A trace without device work (a CPU / gloo run): the collectives' own spans (`gloo:all_reduce` and the
  like, on the process group's worker thread) and the host ops (`cpu_op`) at the top of their thread.
- Steps: `user_annotation` spans named by `step_names` (the recipes label theirs "verify_step",
  "decode_step", "draft_step", "allreduce"; torch's own "ProfilerStep#N"); without any, the whole trace is one step.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import ijson

from app.domain.errors import Invalid

# Collective implementations by kernel (or span) name, most specific first. The names are the kernels'
# own, as their sources spell them: torch symmetric memory (CUDASymmetricMemoryOps.cu:
# multimem_all_reduce_kernel, multimem_one_shot_all_reduce_kernel, one_shot_/two_shot_all_reduce_kernel),
# FlashInfer / TensorRT-LLM fusion (allreduce_fusion_kernel_oneshot_lamport, ..._twoshot), vLLM / SGLang
# custom allreduce (cross_device_reduce_1stage / 2stage), vLLM's quick reduce (quickreduce::
# allreduce_prototype_oneshot / _twoshot), MSCCL++ and NCCL. multimem_all_gather_kernel is no allreduce.
COLLECTIVES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("symm-mem multimem", re.compile(r"multimem_(one_shot_)?all_?reduce", re.I)),
    ("symm-mem one-shot", re.compile(r"one_shot_all_reduce|oneshot_all_reduce", re.I)),
    ("symm-mem two-shot", re.compile(r"two_shot_all_reduce|twoshot_all_reduce", re.I)),
    ("FlashInfer allreduce", re.compile(r"flashinfer.*all_?reduce|allreduce_fusion|lamport", re.I)),
    ("quick reduce", re.compile(r"quickreduce|quick_?all_?reduce|allreduce_prototype_", re.I)),
    ("custom allreduce", re.compile(r"cross_device_reduce_[12]stage|custom_?all_?reduce", re.I)),
    ("MSCCL++", re.compile(r"mscclpp", re.I)),
    ("NCCL allreduce", re.compile(r"nccl\w*all_?reduce", re.I)),
    ("gloo allreduce", re.compile(r"^gloo:all_reduce$", re.I)),
    ("NCCL other", re.compile(r"^nccl", re.I)),
)
ALLREDUCE_KINDS = frozenset(k for k, _ in COLLECTIVES if k not in ("NCCL other",))
DEFAULT_STEPS = ("verify_step", "decode_step", "draft_step", "allreduce")
# Steps that are one forward pass of the target model: their allreduce count is the model's N_ar (a draft
# step's is the draft head's).
FORWARD_STEPS = ("verify_step", "decode_step")
DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
MAX_NAME = 300


def collective_kind(name: str) -> str | None:
    """The collective a kernel or span name is, or None for compute."""
    for kind, pattern in COLLECTIVES:
        if pattern.search(name):
            return kind
    return None


@dataclass
class KernelRow:
    name: str
    kind: str  # "compute" or a collective's name
    calls: int = 0
    total_us: float = 0.0

    @property
    def mean_us(self) -> float:
        return self.total_us / self.calls if self.calls else 0.0


@dataclass
class TraceSummary:
    """What a trace says: per kernel (in the counted steps), the steps, and the model inputs."""

    device: bool  # device kernels counted (else host spans: a CPU trace)
    steps: int
    step_name: str | None
    step_us: float  # total time of the counted steps
    rows: list[KernelRow] = field(default_factory=list)
    events: int = 0

    @property
    def allreduces_per_step(self) -> float | None:
        n = sum(r.calls for r in self.rows if r.kind in ALLREDUCE_KINDS)
        return n / self.steps if self.steps and n else None

    @property
    def allreduce_us(self) -> float | None:
        """The mean in-situ time of one allreduce (over every allreduce kernel of the counted steps)."""
        ars = [r for r in self.rows if r.kind in ALLREDUCE_KINDS]
        calls = sum(r.calls for r in ars)
        return sum(r.total_us for r in ars) / calls if calls else None

    def figures(self) -> dict[str, Any]:
        """What the board keeps of the trace (the artifact's `trace` column): its counted step and the model
        inputs it gives, so that the model reads them without parsing the file again."""
        return {
            "device": self.device,
            "steps": self.steps,
            "step_name": self.step_name,
            "step_us": round(self.step_us, 3),
            "allreduces_per_step": self.allreduces_per_step,
            "allreduce_us": None if self.allreduce_us is None else round(self.allreduce_us, 3),
            "collectives": sorted({r.kind for r in self.rows if r.kind in ALLREDUCE_KINDS}),
            "kernels": len(self.rows),
        }

    def table(self) -> list[dict[str, Any]]:
        """Rows by total time, each with its share of the kernels' total."""
        total = sum(r.total_us for r in self.rows) or 1.0
        return [
            {
                "name": r.name,
                "kind": r.kind,
                "calls": r.calls,
                "total_us": round(r.total_us, 3),
                "mean_us": round(r.mean_us, 3),
                "share": round(r.total_us / total, 4),
            }
            for r in sorted(self.rows, key=lambda r: -r.total_us)
        ]


@dataclass(frozen=True)
class StoredTrace:
    """A stored trace's figures (`TraceSummary.figures`) with where it came from: the model's "from trace #id"."""

    artifact_id: int
    trial_id: int
    approach_id: int | None
    name: str
    figures: dict[str, Any]

    @property
    def n_ar(self) -> float | None:
        """Allreduces per step, only where the step is one the trace names (a trace without step spans counts
        its whole length as one step: its allreduce count is not a per-step figure)."""
        if self.figures.get("step_name") is None:
            return None
        value = self.figures.get("allreduces_per_step")
        return float(value) if isinstance(value, (int, float)) and value > 0 else None

    @property
    def forward_n_ar(self) -> float | None:
        """N_ar for the profitability model: a count per forward pass of the target model (`FORWARD_STEPS`)."""
        return self.n_ar if self.step_name in FORWARD_STEPS else None

    @property
    def t_ar_us(self) -> float | None:
        """The mean allreduce kernel time, only from device kernels (a CPU trace's spans are a floor)."""
        value = self.figures.get("allreduce_us")
        ok = self.figures.get("device") and isinstance(value, (int, float)) and value > 0
        return float(value) if ok else None  # type: ignore[arg-type]

    @property
    def step_name(self) -> str | None:
        name = self.figures.get("step_name")
        return str(name) if name else None

    def label(self, what: str) -> str:
        """ "from trace #7 (trial #12, verify_step x 3, NCCL allreduce, device kernels)" """
        f = self.figures
        parts = [f"trial #{self.trial_id}"]
        if self.step_name:
            parts.append(f"{self.step_name} x {f.get('steps')}")
        parts.extend(str(c) for c in f.get("collectives") or ())
        parts.append("device kernels" if f.get("device") else "CPU spans")
        return f"from trace #{self.artifact_id} ({', '.join(parts)}{': ' + what if what else ''})"


class TraceError(Invalid):
    """The file is not a Chrome / Kineto trace (said in words)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, field="trace")


def _events(stream: IO[bytes]) -> Iterable[dict[str, Any]]:
    """The trace's events, one at a time: a {"traceEvents": [...]} object or a bare JSON array."""
    head = stream.read(256).lstrip()
    stream.seek(0)
    prefix = "item" if head.startswith(b"[") else "traceEvents.item"
    try:
        yield from ijson.items(stream, prefix, use_float=True)
    except ijson.JSONError as exc:
        raise TraceError(f"not a Chrome trace (JSON): {exc}") from None


class _Complete:
    """The trace's complete events (`"ph": "X"`, the ones with a duration), counting every event read (`seen`)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.seen = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for ev in _events(self.stream):
            self.seen += 1
            if isinstance(ev, dict) and ev.get("ph") == "X":
                yield ev


@functools.lru_cache(maxsize=32)
def read_stored(path: Path, sha256: str) -> TraceSummary:
    """read_trace of a stored artifact, once per content (its hash is the key: an object never changes)."""
    return read_trace(path)


def read_trace(source: Path, step_names: Iterable[str] = DEFAULT_STEPS) -> TraceSummary:
    """Stream a trace into a TraceSummary (two passes over a path: the windows first, then the work)."""
    with source.open("rb") as f:
        first = _first_pass(f, tuple(step_names))
    with source.open("rb") as f:
        return _second_pass(f, first)


@dataclass
class _FirstPass:
    windows: dict[int, list[tuple[float, float]]]  # the chosen step's spans per pid, sorted
    launches: dict[int, float]  # correlation id -> host launch time
    has_device: bool
    step_name: str | None


def _first_pass(stream: IO[bytes], step_names: tuple[str, ...]) -> _FirstPass:
    """Step windows per pid, each launch's host time by correlation id, and whether device work is there."""
    windows: dict[str, dict[int, list[tuple[float, float]]]] = {}
    launches: dict[int, float] = {}
    has_device = False
    complete = _Complete(stream)
    for ev in complete:
        cat = ev.get("cat")
        if cat in DEVICE_CATEGORIES:
            has_device = True
        elif cat in LAUNCH_CATEGORIES:
            corr = (ev.get("args") or {}).get("correlation")
            if isinstance(corr, int):
                launches[corr] = float(ev.get("ts", 0.0))
        elif cat == "user_annotation":
            name = str(ev.get("name", ""))
            label = next(
                (s for s in step_names if name == s), "ProfilerStep" if name.startswith("ProfilerStep#") else None
            )
            if label:
                start = float(ev.get("ts", 0.0))
                windows.setdefault(label, {}).setdefault(int(ev.get("pid", 0)), []).append(
                    (start, start + float(ev.get("dur", 0.0)))
                )
    if not complete.seen:
        raise TraceError("the trace holds no events")
    # The recipe's own label wins over torch's ProfilerStep; the first named one that is there.
    step = next((s for s in (*step_names, "ProfilerStep") if s in windows), None)
    chosen = windows.get(step, {}) if step else {}
    for spans in chosen.values():
        spans.sort()
    return _FirstPass(chosen, launches, has_device, step)


def _step_of(windows: dict[int, list[tuple[float, float]]], pid: int, ts: float) -> int | None:
    """Index of the step window (of this pid, else any pid) holding ts; -1 when there are no windows."""
    if not windows:
        return -1
    spans = windows.get(pid) or next(iter(windows.values()))
    lo, hi = 0, len(spans) - 1
    while lo <= hi:  # the last window starting at or before ts
        mid = (lo + hi) // 2
        if spans[mid][0] <= ts:
            lo = mid + 1
        else:
            hi = mid - 1
    if hi >= 0 and spans[hi][0] <= ts <= spans[hi][1]:
        return hi
    return None


def _second_pass(stream: IO[bytes], first: _FirstPass) -> TraceSummary:
    windows, launches, has_device = first.windows, first.launches, first.has_device
    rows: dict[str, KernelRow] = {}
    complete = _Complete(stream)
    for ev in complete:
        cat = ev.get("cat")
        name = str(ev.get("name", ""))[:MAX_NAME]
        if has_device:
            if cat not in DEVICE_CATEGORIES:
                continue
            corr = (ev.get("args") or {}).get("correlation")
            launched = launches.get(corr) if isinstance(corr, int) else None
            where = float(ev.get("ts", 0.0)) if launched is None else launched
        else:
            kind = collective_kind(name)
            if not (cat == "cpu_op" or (cat == "user_annotation" and kind)):
                continue
            where = float(ev.get("ts", 0.0))
        if _step_of(windows, int(ev.get("pid", 0)), where) is None:
            continue  # outside every counted step (warm-up, set-up)
        row = rows.get(name)
        if row is None:
            row = rows[name] = KernelRow(name, collective_kind(name) or "compute")
        row.calls += 1
        row.total_us += float(ev.get("dur", 0.0))
    steps = max((len(s) for s in windows.values()), default=0) or 1
    step_us = sum(end - start for spans in windows.values() for start, end in spans[:steps]) if windows else 0.0
    if not has_device:
        # Host ops nest (aten::matmul holds aten::mm): keep the collectives' spans and the leaf-most ops only by
        # dropping ops whose name says they dispatch to another (a heuristic good for the table, not for sums).
        rows = {k: r for k, r in rows.items() if r.kind != "compute" or not _wrapper_op(k)}
    return TraceSummary(has_device, steps, first.step_name, step_us, list(rows.values()), complete.seen)


def _wrapper_op(name: str) -> bool:
    return name in {"aten::matmul", "aten::linear", "c10d::allreduce_", "aten::to", "aten::copy_"}


def kernel_diff(a: TraceSummary, b: TraceSummary) -> list[dict[str, Any]]:
    """Two traces' kernels side by side, per step: what got faster or slower, what appeared, what vanished."""
    per_a = {r.name: r for r in a.rows}
    per_b = {r.name: r for r in b.rows}
    out: list[dict[str, Any]] = []
    for name in sorted(set(per_a) | set(per_b)):
        ra, rb = per_a.get(name), per_b.get(name)
        ta = ra.total_us / a.steps if ra else 0.0
        tb = rb.total_us / b.steps if rb else 0.0
        change = "appeared" if ra is None else "vanished" if rb is None else "same"
        if ra is not None and rb is not None and ta > 0:
            ratio = tb / ta
            change = "faster" if ratio < 0.97 else "slower" if ratio > 1.03 else "same"
        out.append(
            {
                "name": name,
                "kind": (ra or rb).kind,  # type: ignore[union-attr]
                "us_per_step": [round(ta, 3), round(tb, 3)],
                "calls_per_step": [ra.calls / a.steps if ra else 0, rb.calls / b.steps if rb else 0],
                "change": change,
            }
        )
    out.sort(key=lambda row: -abs(float(row["us_per_step"][1]) - float(row["us_per_step"][0])))
    return out
