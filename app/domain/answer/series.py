"""The measurements the charts draw beside the model: latency-vs-bytes series, throughput rows, stack labels."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from app.domain.answer.latency import LatencyPoint, allreduce_curve
from app.domain.answer.metrics import CampaignMetrics, MetricRow, is_cpu_floor
from app.domain.fingerprint import STACK_COMPONENTS, component_value
from app.models import Approach
from app.protocol.metrics import MetricName


@dataclass(frozen=True)
class LatencySeries:
    approach_title: str
    status: str
    points: tuple[LatencyPoint, ...]
    cpu_floor: bool = False


def latency_series(metrics: CampaignMetrics, approach_rows: list[Approach]) -> list[LatencySeries]:
    """Each approach's allreduce latency-vs-size curve (newest trial, preferred mode); CPU ones flagged."""
    by_approach: dict[int, list[MetricRow]] = defaultdict(list)
    for m in metrics.newest(MetricName.ALLREDUCE_LATENCY_US):
        by_approach[m.approach_id].append(m)
    out = []
    for approach in approach_rows:
        curve = allreduce_curve(by_approach.get(approach.id, []))  # type: ignore[arg-type]
        if curve:
            out.append(
                LatencySeries(
                    approach.title, approach.status, tuple(curve), cpu_floor=any(is_cpu_floor(p.tags) for p in curve)
                )
            )
    return out


@dataclass(frozen=True)
class ThroughputRow:
    approach_title: str
    status: str
    reason: str
    tok_s: float | None  # None: never measured
    trial_id: int | None
    speculative: bool


def throughput_rows(metrics: CampaignMetrics, approach_rows: list[Approach]) -> list[ThroughputRow]:
    """Each approach's best measured decode throughput (None when it has none), in priority order; the
    benchmark's figure is preferred to the decode-log one."""
    speculative_trials = {m.trial_id for m in metrics.all(MetricName.ACCEPT_LENGTH)}
    best: dict[int, MetricRow] = {}
    for m in metrics.all(MetricName.THROUGHPUT):
        rank = (-MetricName.THROUGHPUT.index(m.name), m.value)
        have = best.get(m.approach_id)
        if have is None or rank > (-MetricName.THROUGHPUT.index(have.name), have.value):
            best[m.approach_id] = m
    out = []
    for approach in approach_rows:
        row = best.get(approach.id)  # type: ignore[arg-type]
        out.append(
            ThroughputRow(
                approach.title,
                approach.status,
                approach.reason,
                row.value if row else None,
                row.trial_id if row else None,
                bool(row and row.trial_id in speculative_trials),
            )
        )
    return out


_SUMMARY_COMPONENTS = ("torch", "cuda", "nccl", "sglang", "sm")


def stack_summary(fingerprint: dict[str, Any] | None) -> str:
    """A short label of a stack fingerprint, e.g. "torch 2.11.0 / CUDA 12.8 / SM 9.0".

    Only version components are read: a fingerprint also holds the host name, never shown."""
    parts = []
    for component in _SUMMARY_COMPONENTS:
        value = component_value(fingerprint, component)
        if value:
            parts.append(f"{STACK_COMPONENTS[component]} {value[:32]}")
    return " / ".join(parts)
