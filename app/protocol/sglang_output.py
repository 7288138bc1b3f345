"""Parsers for SGLang's output formats (formats in docs/recipes.md).

bench_serving's printed summary, a benchmark's JSON result file, the server's `Decode batch` log line, its
/get_server_info document and its readiness line. The sglang_server recipe reads with these and the server's
failure signatures (app/domain/signatures.py) read the same formats through them.
"""

from __future__ import annotations

import json
import re
from typing import Any

from app.protocol.metrics import MetricName as M

# The line the server logs once it accepts requests.
READY_LINE = "The server is fired up and ready to roll!"

# bench_serving summary: label padded to 40 columns, then the value (.2f).
_SUMMARY_LINE = re.compile(r"^(?P<label>[A-Za-z][^:\n]*?):\s+(?P<value>-?\d+(?:\.\d+)?)\s*$")
# The benchmark's printed labels and its result file's keys -> (metric name, unit).
SUMMARY_METRICS = {
    "Output token throughput (tok/s)": (M.OUTPUT_THROUGHPUT, "tok/s"),
    "Median TPOT (ms)": (M.MEDIAN_TPOT_MS, "ms"),
    "Median ITL (ms)": (M.MEDIAN_ITL_MS, "ms"),
    "Median TTFT (ms)": (M.MEDIAN_TTFT_MS, "ms"),
    "Accept length": (M.BENCH_ACCEPT_LENGTH, ""),
}
JSON_METRICS = {
    "output_throughput": (M.OUTPUT_THROUGHPUT, "tok/s"),
    "median_tpot_ms": (M.MEDIAN_TPOT_MS, "ms"),
    "median_itl_ms": (M.MEDIAN_ITL_MS, "ms"),
    "median_ttft_ms": (M.MEDIAN_TTFT_MS, "ms"),
    "accept_length": (M.BENCH_ACCEPT_LENGTH, ""),
    "acc_length": (M.BENCH_ACCEPT_LENGTH, ""),
}
_DECODE_LINE = re.compile(
    r"Decode batch\b.*?accept len: (?P<accept>[0-9.]+).*?gen throughput \(token/s\): (?P<tput>[0-9.]+)"
)


def parse_bench_stdout(text: str) -> dict[str, float]:
    """Metric name -> value from bench_serving's printed summary."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = _SUMMARY_LINE.match(line.strip())
        if match and match.group("label") in SUMMARY_METRICS:
            out[SUMMARY_METRICS[match.group("label")][0]] = float(match.group("value"))
    return out


def parse_result_json(text: str) -> dict[str, float]:
    """Metric name -> value from the last JSON line a benchmark appended to its result file.

    `acc_length` -1 (bench_one_batch_server without speculation) means "no speculation": left out.
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return {}
    try:
        obj = json.loads(lines[-1])
    except ValueError:
        return {}
    out: dict[str, float] = {}
    for key, (name, _unit) in JSON_METRICS.items():
        value = obj.get(key) if isinstance(obj, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if name == M.BENCH_ACCEPT_LENGTH and value < 0:
                continue
            out[name] = float(value)
    return out


def parse_decode_line(line: str) -> tuple[float, float] | None:
    """(accept len, gen throughput tok/s) from a server `Decode batch, ...` log line."""
    match = _DECODE_LINE.search(line)
    return (float(match.group("accept")), float(match.group("tput"))) if match else None


def accept_length_from_server_info(info: Any) -> float | None:
    try:
        value = info["internal_states"][0]["avg_spec_accept_length"]
    except (KeyError, IndexError, TypeError):
        return None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


UNITS = {name: unit for name, unit in list(SUMMARY_METRICS.values()) + list(JSON_METRICS.values())}
