"""The structured metric line recipes print, and its parser.

One line per result: the prefix, then a JSON object with name, value, unit and tags.
Standard library only: recipes run on GPU nodes that have torch but not the server's packages.
"""
from __future__ import annotations

import json
import math
import sys
from typing import Any, TextIO

METRIC_PREFIX = "@@campaign-metric "
# A line naming the trial's phase (launching, waiting for ready, benchmarking, tearing down, ...).
PHASE_PREFIX = "@@campaign-phase "


def emit_phase(name: str, *, stream: TextIO | None = None) -> None:
    """Announce a phase; the runner shows it on the trial page while the trial runs."""
    out = stream or sys.stdout
    out.write(f"{PHASE_PREFIX}{name}\n")
    out.flush()


def format_metric(name: str, value: float, unit: str = "", **tags: Any) -> str:
    """One metric line (without newline)."""
    return METRIC_PREFIX + json.dumps(
        {"name": name, "value": value, "unit": unit, "tags": tags}, sort_keys=True
    )


def emit(name: str, value: float, unit: str = "", *, stream: TextIO | None = None, **tags: Any) -> None:
    """Print one metric line and flush, so it reaches the runner when it is measured."""
    out = stream or sys.stdout
    out.write(format_metric(name, value, unit, **tags) + "\n")
    out.flush()


def parse_metric_line(line: str) -> dict[str, Any] | None:
    """The metric in a log line, or None when the line is not a (valid) metric line."""
    at = line.find(METRIC_PREFIX)
    if at < 0:
        return None
    try:
        obj = json.loads(line[at + len(METRIC_PREFIX):])
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    value = obj.get("value")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    tags = obj.get("tags") or {}
    if not isinstance(tags, dict):
        return None
    return {"name": obj["name"], "value": float(value), "unit": str(obj.get("unit") or ""), "tags": tags}


class MetricName:
    """The metric names recipes emit and the server's profitability model reads: the one place they are spelled.

    Tags every torch recipe adds: `device` ("cuda" / "cpu") and `scaled: true` when the geometry was
    scaled down to fit a CPU; such figures are a CPU floor and never feed the model."""

    # allreduce recipe, tags bytes, tokens, mode, backend, world_size, method ("nccl-tests" eager,
    # "graph-replay" graph): the headline per-allreduce latency.
    ALLREDUCE_LATENCY_US = "allreduce_latency_us"
    # allreduce recipe, each eager call timed by its own event pair: inflated by the timing method, never an input.
    ALLREDUCE_PER_CALL_US = "allreduce_per_call_us"
    ALLREDUCE_IN_SITU_US = "allreduce_in_situ_us"  # verify_step recipe; tags tokens, allreduces, layers, bytes
    VERIFY_COMPUTE_MS = "verify_compute_ms"  # verify_step recipe
    DECODE_STEP_MS = "decode_step_ms"  # synthetic plain decode step (verify_step at 1 token): the node's T_base
    DRAFT_STEP_MS = "draft_step_ms"  # draft_step recipe: an EAGLE-3 draft head, ms per draft step
    OUTPUT_THROUGHPUT = "output_throughput_tok_s"  # sglang_server (bench_serving / bench_one_batch_server)
    GEN_THROUGHPUT_LOG = "decode_log_gen_throughput_tok_s"  # sglang_server, from Decode batch log lines
    MEDIAN_TPOT_MS = "median_tpot_ms"  # sglang_server
    # Accept length, best source first: the benchmark's figure, the server's cumulative one, decode log lines.
    ACCEPT_LENGTH = ("accept_length", "server_avg_spec_accept_length", "decode_log_accept_len")
    THROUGHPUT = (OUTPUT_THROUGHPUT, GEN_THROUGHPUT_LOG)
