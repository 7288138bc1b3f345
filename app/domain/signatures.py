"""Failure signatures: from a finished trial's log, exit status and metrics to a proposed verdict.

`classify` tries the signatures in SIGNATURES order and returns the first that matches. The
order runs from the most specific evidence to the least, because one failure leaves several
traces: a torch symmetric-memory `KeyError: 12` also makes NCCL complain and the server miss
its readiness deadline; an out-of-memory error often surfaces again as an NCCL error.

  0. preflight_failed      a preflight check's `@@campaign-preflight {json}`      the check's own proposal
  1. unknown_flag          argparse `error: unrecognized arguments: --x`        retest    (sglang)
  2. module_not_installed  `ModuleNotFoundError: No module named 'mscclpp'`     deferred
  3. symm_mem_sm_keyerror  `KeyError: 12` in torch symmetric memory             dead_end  (torch, sm)
  4. jit_no_sm_target      nvcc / FlashInfer JIT without a target for the SM    dead_end  (cuda|flashinfer, sm)
  5. cuda_oom              `torch.OutOfMemoryError: CUDA out of memory`         dead_end
  6. illegal_memory_access `CUDA error: an illegal memory access`              dead_end  (torch, sglang, sm)
  6b. segfault            `Segmentation fault (core dumped)`, SIGSEGV          inconclusive (torch, sglang)
  7. cuda_graph_capture    CUDA graph capture failed                            dead_end  (nccl, torch)
  8. port_in_use           `[Errno 98] Address already in use`                  retest
  9. nccl_error            `NCCL WARN`, `ncclInternalError`, watchdog timeout   inconclusive (nccl)
 10. readiness_stall       not ready, and the server's last line was a startup  inconclusive
                           phase (e.g. "Capturing batches 1/36") it never left:
                           the recipe's not-ready message, or a raw server log
                           killed or timed out in that phase
 10b. readiness_timeout    the sglang_server recipe's own not-ready message     inconclusive
 11. killed_by_signal      signal 9 / `Killed` with no other cause              inconclusive
 12. slower_than_baseline  finished, but a throughput metric below the baseline dead_end  (not bound)

Verdicts: dead_end (the approach does not work, on this stack when bound_to names components),
deferred (could not be tried yet: something must be built or installed), retest (the trial
did not test the approach: fix the setup and run again), inconclusive (it failed, but the
evidence does not say whether the approach is at fault). A person confirms or edits each.
bound_to is {"components": [...]} naming the stack components (app.domain.fingerprint) the
verdict is only true for, or None when no stack change would change it.
Pure Python: no web framework, no database.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runners.preflight import parse_preflight_line
from runners.recipes.metric import MetricName, parse_metric_line
from runners.sglang_output import SUMMARY_METRICS, parse_bench_stdout

VERDICTS = ("dead_end", "deferred", "retest", "inconclusive")

# The sglang_server recipe prints this (runners/recipes/sglang_server.py READY_TIMEOUT_MESSAGE):
#   sglang_server: server not ready within 1800s: no 'The server is fired up and ready to roll!' line
#   and GET /health never returned 200
READINESS_TIMEOUT_RE = re.compile(
    r"sglang_server: server not ready within (?P<seconds>[0-9.]+)s\b"
    r"(?:.*?; its last line came (?P<idle>[0-9.]+)s before)?"
)


@dataclass(frozen=True)
class Classification:
    signature: str
    cause: str
    verdict: str
    reason: str
    bound_to: dict[str, Any] | None
    evidence_line: str | None


@dataclass(frozen=True)
class _Trial:
    lines: list[str]
    exit_code: int | None
    signal: int | None
    metrics: list[dict]
    baseline: dict | None
    timed_out: bool = False


def _find(lines: list[str], pattern: re.Pattern[str]) -> tuple[int, re.Match[str]] | None:
    for index, line in enumerate(lines):
        match = pattern.search(line)
        if match:
            return index, match
    return None


def _bound(*components: str) -> dict[str, Any]:
    return {"components": list(components)}


def _quote(line: str, limit: int = 240) -> str:
    line = line.strip()
    return line if len(line) <= limit else line[: limit - 1] + "\u2026"


# --- the signatures, in order ---------------------------------------------------------------

_PREFLIGHT_ERROR = re.compile(r"\b\w*Error\b|\berror:|\bfatal\b")


def _preflight_failed(t: _Trial) -> Classification | None:
    for line in t.lines:
        record = parse_preflight_line(line)
        if record is None or record.get("verdict") not in VERDICTS or not record.get("cause"):
            continue
        components = [c for c in record.get("bound_to") or [] if isinstance(c, str)]
        version = record.get("sglang_version")
        # The check's output is indented above its FAILED line; its error line is the evidence.
        output: list[str] = []
        for previous in reversed(t.lines[: t.lines.index(line)]):
            if previous.startswith("preflight: ") and "FAILED" in previous:
                continue
            if not previous.startswith("    "):
                break
            output.append(previous)
        evidence = next((ln for ln in output if _PREFLIGHT_ERROR.search(ln)), output[0] if output else None)
        return Classification(
            "preflight_failed",
            str(record["cause"]),
            record["verdict"],
            f"Preflight check {record.get('check')!r} failed before the server loaded any weights: "
            f"{record.get('summary') or record['cause']}"
            + (f" (sglang {version})" if version and "sglang" in components else "")
            + ".",
            _bound(*components) if components else None,
            evidence,
        )
    return None


_UNRECOGNIZED = re.compile(r"(?P<prog>\S+): error: unrecognized arguments: (?P<args>.+)$")


def _unknown_flag(t: _Trial) -> Classification | None:
    found = _find(t.lines, _UNRECOGNIZED)
    if not found:
        return None
    index, m = found
    flags = m.group("args").strip()
    return Classification(
        "unknown_flag",
        f"flag not supported by this sglang: {flags}",
        "retest",
        f'{m.group("prog")} rejected {flags} ("{_quote(t.lines[index])}"); the approach was not tried. '
        "Re-test with an sglang that has the flag, or with the flag this version spells differently.",
        _bound("sglang"),
        t.lines[index],
    )


_NO_MODULE = re.compile(r"ModuleNotFoundError: No module named '(?P<module>[\w.]+)'")


def _module_not_installed(t: _Trial) -> Classification | None:
    found = _find(t.lines, _NO_MODULE)
    if not found:
        return None
    index, m = found
    module = m.group("module")
    return Classification(
        "module_not_installed",
        f"{module} not installed; needs a build",
        "deferred",
        f'The trial stopped at "{_quote(t.lines[index])}": {module.split(".")[0]} is not installed on this node.',
        None,
        t.lines[index],
    )


_KEYERROR_SM = re.compile(r"^\s*KeyError: \(?(?P<major>\d{1,3})(?:, ?(?P<minor>\d+)\))?\s*$")
_SYMM_CONTEXT = re.compile(r"symm_mem|symmetric_memory|SymmMem|SYMM_MEM", re.IGNORECASE)
_SYMM_UNSUPPORTED = re.compile(r"SymmMem\w*: Device capability (?P<major>\d+) not supported")
# SM majors of shipping GPUs (7.x Volta/Turing .. 12.x Blackwell workstation), or 90/100/120 style keys.
_SM_MAJORS = {7, 8, 9, 10, 11, 12, 13, 70, 75, 80, 86, 89, 90, 100, 103, 110, 120, 121}


def _symm_mem_sm_keyerror(t: _Trial) -> Classification | None:
    for index, line in enumerate(t.lines):
        m = _KEYERROR_SM.match(line)
        if m and int(m.group("major")) in _SM_MAJORS:
            context = "\n".join(t.lines[max(0, index - 25) : index])
            if not _SYMM_CONTEXT.search(context):
                continue
        else:
            m = _SYMM_UNSUPPORTED.search(line)
            if not m:
                continue
        sm = m.group("major")
        return Classification(
            "symm_mem_sm_keyerror",
            f"torch symmetric memory has no entry for SM {sm} (GPU architecture not supported)",
            "dead_end",
            f'Startup failed with "{_quote(line)}" in the torch symmetric-memory communicator: its per-architecture '
            f"lookup table lacks SM {sm}. True for this torch on this GPU; a newer torch may add it.",
            _bound("torch", "sm"),
            line,
        )
    return None


_NVCC_ARCH = re.compile(r"nvcc fatal\s*:\s*Unsupported gpu architecture '(?P<arch>compute_\w+|sm_\w+)'")
_JIT_NO_TARGET = re.compile(
    r"(?:no (?:supported )?(?:cuda )?(?:arch(?:itecture)?|target|kernel image)s? (?:is )?(?:available |found )?for "
    r"(?:sm[_ ]?|SM ?|compute capability )(?P<sm>\d+(?:\.\d)?a?))"
    r"|(?:(?:FlashInfer|flashinfer)\b.*?\b(?:does not support|not supported on|unsupported)\b.*?"
    r"(?:sm[_ ]?|SM ?|compute capability )(?P<sm2>\d+(?:\.\d)?a?))",
    re.IGNORECASE,
)


def _jit_no_sm_target(t: _Trial) -> Classification | None:
    found = _find(t.lines, _NVCC_ARCH)
    if found:
        index, m = found
        return Classification(
            "jit_no_sm_target",
            f"the CUDA compiler cannot target {m.group('arch')}",
            "dead_end",
            f'A JIT kernel build failed: "{_quote(t.lines[index])}". This nvcc does not know the GPU\'s architecture; '
            "a newer CUDA toolkit may.",
            _bound("cuda", "sm"),
            t.lines[index],
        )
    found = _find(t.lines, _JIT_NO_TARGET)
    if found:
        index, m = found
        sm = m.group("sm") or m.group("sm2")
        return Classification(
            "jit_no_sm_target",
            f"no kernel build target for SM {sm}",
            "dead_end",
            f'The kernel JIT has no target for this GPU: "{_quote(t.lines[index])}". A newer FlashInfer/CUDA may add it.',
            _bound("flashinfer", "cuda", "sm"),
            t.lines[index],
        )
    return None


# The error itself, not advice that mentions it ("lower --mem-fraction-static to avoid CUDA out of memory").
_OOM = re.compile(
    r"OutOfMemoryError: CUDA out of memory\.?(?: Tried to allocate (?P<size>[\d.]+ [KMGT]i?B))?"
    r"|CUDA out of memory\. Tried to allocate (?P<size2>[\d.]+ [KMGT]i?B)"
    r"|CUDA error: out of memory|Cuda failure 'out of memory'|cudaErrorMemoryAllocation"
)


def _cuda_oom(t: _Trial) -> Classification | None:
    found = _find(t.lines, _OOM)
    if not found:
        return None
    index, m = found
    size = m.group("size") or m.group("size2")
    size = f" (tried to allocate {size})" if size else ""
    return Classification(
        "cuda_oom",
        f"CUDA out of memory{size}",
        "dead_end",
        f'The GPU ran out of memory: "{_quote(t.lines[index])}". The approach does not fit beside the model '
        "at these settings.",
        None,
        t.lines[index],
    )


_ILLEGAL = re.compile(r"an illegal memory access was encountered|cudaErrorIllegalAddress|CUDA_ERROR_ILLEGAL_ADDRESS")


def _illegal_memory_access(t: _Trial) -> Classification | None:
    found = _find(t.lines, _ILLEGAL)
    if not found:
        return None
    index, _ = found
    return Classification(
        "illegal_memory_access",
        "a GPU kernel made an illegal memory access",
        "dead_end",
        f'A kernel faulted: "{_quote(t.lines[index])}": a bug in this stack\'s kernels for this GPU, '
        "which another torch/sglang build may not have.",
        _bound("torch", "sglang", "sm"),
        t.lines[index],
    )


_SEGFAULT = re.compile(
    r"Segmentation fault|\bcore dumped\b|Fatal Python error: Segmentation fault|"
    r"\bSIGSEGV\b|signal 11 \(SIGSEGV\)|received signal SIGSEGV"
)


def _segfault(t: _Trial) -> Classification | None:
    found = _find(t.lines, _SEGFAULT)
    if not found and t.signal != 11 and t.exit_code not in (139, -11):
        return None
    line = t.lines[found[0]] if found else None
    evidence = f': "{_quote(line)}"' if line else f" (signal 11, exit code {t.exit_code})"
    return Classification(
        "segfault",
        "segmentation fault (a native crash)",
        "inconclusive",
        f"A process crashed in native code{evidence}. A bug in this stack's native code (torch, sglang kernels, "
        "a driver library), not a verdict on the approach: re-run to see if it repeats, and on another stack.",
        _bound("torch", "sglang"),
        line,
    )


_GRAPH_CAPTURE = re.compile(
    r"CUDA graph capture failed|Capture cuda graph failed|cudaErrorStreamCaptureUnsupported|"
    r"cudaErrorStreamCaptureInvalidated|cudaErrorStreamCaptureImplicit|operation not permitted when stream is capturing|"
    r"operation failed due to a previous error during capture|Graph capture failed",
    re.IGNORECASE,
)


def _cuda_graph_capture(t: _Trial) -> Classification | None:
    found = _find(t.lines, _GRAPH_CAPTURE)
    if not found:
        return None
    index, _ = found
    return Classification(
        "cuda_graph_capture",
        "incompatible with CUDA graphs (capture failed)",
        "dead_end",
        f'CUDA graph capture failed: "{_quote(t.lines[index])}". The fast decode path needs CUDA graphs, so '
        "this setting cannot be used with it on this stack.",
        _bound("nccl", "torch"),
        t.lines[index],
    )


_PORT = re.compile(
    r"\[Errno 98\].*address already in use|EADDRINUSE|address already in use \(errno: 98\)", re.IGNORECASE
)


def _port_in_use(t: _Trial) -> Classification | None:
    found = _find(t.lines, _PORT)
    if not found:
        return None
    index, _ = found
    return Classification(
        "port_in_use",
        "port already in use",
        "retest",
        f'A port the trial needed was taken: "{_quote(t.lines[index])}" (a previous server still running?). '
        "The approach was not tried; free the port and run again.",
        None,
        t.lines[index],
    )


_NCCL = re.compile(
    r"Watchdog caught collective operation timeout|NCCL WARN|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|"
    r"ncclRemoteError|ncclInvalidUsage|NCCL error|DistBackendError"
)


def _nccl_error(t: _Trial) -> Classification | None:
    found = _find(t.lines, _NCCL)
    if not found:
        return None
    index, m = found
    timeout = "timeout" in m.group(0).lower()
    return Classification(
        "nccl_error",
        "NCCL collective timed out" if timeout else "NCCL error",
        "inconclusive",
        f'NCCL failed: "{_quote(t.lines[index])}". This may be the approach\'s setting or a hang elsewhere; '
        "look at the lines before it (NCCL_DEBUG=INFO shows the transport).",
        _bound("nccl"),
        t.lines[index],
    )


# The host's OOM killer (or a shell) saying it killed the process.
_KILLED = re.compile(r"^\s*Killed\s*$|\bKilled process \d+|Out of memory: Killed process|oom-kill")

# Startup phases a server can hang in, matched on its last output line (most specific first). The texts are
# SGLang's own (0.5.23: model_runner.py, cuda_graph_setup.py, decode_cuda_graph_runner.py, weight_utils.py,
# distributed/bootstrap.py; 0.5.9's older names kept); a progress bar's n/total is read with or without its bar.
_STALL_PHASES = (
    (
        re.compile(r"Capturing batches\b.*?(?P<n>\d+)/(?P<total>\d+)"),
        "CUDA graph capture (Capturing batches {n}/{total})",
    ),
    (re.compile(r"Capture (?:[\w-]+ )*(?:cuda|CUDA) graph begin"), "CUDA graph capture"),
    (
        re.compile(r"Loading safetensors checkpoint shards:.*?(?P<n>\d+)/(?P<total>\d+)"),
        "weight loading (checkpoint shards {n}/{total})",
    ),
    (re.compile(r"Load weight begin"), "weight loading"),
    (re.compile(r"Init (?:torch distributed|parallel) begin"), "torch distributed init"),
    (re.compile(r"KV Cache is allocated|Memory pool end"), "after the KV cache allocation"),
)
# Lines that are the recipe's or the runner's, not the server's own output.
_OWN_LINE = re.compile(r"^(?:sglang_server: |@@campaign-|preflight: |    )")
STALL_MIN_IDLE_S = 60.0
# Signals that end a trial from outside (the runner's time limit or a cancel: SIGTERM, then SIGKILL).
_STOP_SIGNALS = {2: "SIGINT", 9: "SIGKILL", 15: "SIGTERM"}


def _stall_phase(lines: list[str]) -> tuple[str, str, str] | None:
    """(phase, the line as last drawn, the line) when the server's last output line is a startup phase."""
    last = next((ln for ln in reversed(lines) if ln.strip() and not _OWN_LINE.match(ln)), None)
    if last is None:
        return None
    # A progress bar redraws in place (\r, or its states run together in a captured log): the last state counts.
    shown = last.rsplit("\r", 1)[-1]
    for pattern, name in _STALL_PHASES:
        matches = list(pattern.finditer(shown))
        if matches:
            return name.format(**matches[-1].groupdict()), shown, last
    return None


def _stopped_by(t: _Trial) -> str | None:
    """How the trial was stopped from outside, in words, or None when it ended by itself."""
    sig = t.signal
    if sig is None and t.exit_code is not None and t.exit_code in (137, -9, 143, -15):
        sig = 9 if t.exit_code in (137, -9) else 15
    if sig in _STOP_SIGNALS:
        return f"killed ({_STOP_SIGNALS[sig]})" + (" at its time limit" if t.timed_out else "")
    return "stopped at its time limit" if t.timed_out else None


def _readiness_stall(t: _Trial) -> Classification | None:
    """The server never left a startup phase: from the recipe's not-ready message (with how long the server
    was quiet), or from a raw server log whose last line is a startup phase when the trial was killed or
    timed out (a host OOM kill says so itself and is left to killed_by_signal)."""
    found = _find(t.lines, READINESS_TIMEOUT_RE)
    if found:
        index, m = found
        if not m.group("idle") or float(m.group("idle")) < STALL_MIN_IDLE_S:
            return None  # still printing (slow, not stalled), or a log that does not say how quiet it was
        stall = _stall_phase(t.lines[:index])
        how = f"printed nothing for its last {float(m.group('idle')):g}s"
        hang = "not a slow load."
    else:
        stopped = _stopped_by(t)
        if stopped is None or _find(t.lines, _KILLED):
            return None
        stall = _stall_phase(t.lines)
        how = f"was {stopped} while still in it"
        hang = "or a load slower than the limit: compare with how long that phase takes on this node."
    if stall is None:
        return None
    phase, shown, last = stall
    return Classification(
        "readiness_stall",
        f"readiness stall at {phase}",
        "inconclusive",
        f'The server never became ready and {how}: it stopped at {phase} ("{_quote(shown)}"). '
        f"A hang in that phase with this approach (a collective that never completes, a capture that waits), {hang}",
        None,
        last,
    )


def _readiness_timeout(t: _Trial) -> Classification | None:
    found = _find(t.lines, READINESS_TIMEOUT_RE)
    if not found:
        return None
    index, m = found
    return Classification(
        "readiness_timeout",
        f"server not ready within {m.group('seconds')}s",
        "inconclusive",
        f'The server never became ready ("{_quote(t.lines[index])}") and printed no recognized error: '
        "it may hang at startup with this approach, or need longer to load.",
        None,
        t.lines[index],
    )


def _killed_by_signal(t: _Trial) -> Classification | None:
    found = _find(t.lines, _KILLED)
    sig = t.signal
    if sig is None and t.exit_code is not None and t.exit_code in (137, -9):
        sig = 9
    if sig is None and not found:
        return None
    if sig is not None and sig != 9 and not found:
        return Classification(
            "killed_by_signal",
            f"stopped by signal {sig}",
            "inconclusive",
            f"The trial was ended by signal {sig} with no error in its log (cancelled, or its time limit ran out).",
            None,
            None,
        )
    line = t.lines[found[0]] if found else None
    evidence = f' ("{_quote(line)}")' if line else ""
    return Classification(
        "killed_by_signal",
        "killed (SIGKILL) with no other cause: host out-of-memory killer or a time limit",
        "inconclusive",
        f"The trial was killed by signal 9{evidence} and the log shows no error of its own; check the host's "
        "memory (dmesg: oom-kill) and the trial's time limit.",
        None,
        line,
    )


# Higher is better for MetricName.THROUGHPUT; a finished trial below baseline by more than the margin is a dead end.
BASELINE_MARGIN = 0.02


def _slower_than_baseline(t: _Trial) -> Classification | None:
    if not t.baseline or t.exit_code not in (0, None) or t.signal is not None:
        return None
    for name in MetricName.THROUGHPUT:
        base = t.baseline.get(name)
        values: list[float] = []
        for m in t.metrics:
            v = m.get("value")
            if m.get("name") == name and isinstance(v, (int, float)):
                values.append(v)
        if not isinstance(base, (int, float)) or base <= 0 or not values:
            continue
        value = values[-1]
        if value < base * (1 - BASELINE_MARGIN):
            unit = next((m.get("unit") for m in t.metrics if m.get("name") == name and m.get("unit")), "tok/s")
            return Classification(
                "slower_than_baseline",
                f"slower than baseline: {value:g} {unit} vs {base:g} {unit} baseline",
                "dead_end",
                f"The trial finished but {name} was {value:g} {unit} against the baseline's {base:g} {unit} "
                f"({value / base:.0%} of it).",
                None,
                None,
            )
    return None


SIGNATURES: tuple[tuple[str, Callable[[_Trial], Classification | None]], ...] = (
    ("preflight_failed", _preflight_failed),
    ("unknown_flag", _unknown_flag),
    ("module_not_installed", _module_not_installed),
    ("symm_mem_sm_keyerror", _symm_mem_sm_keyerror),
    ("jit_no_sm_target", _jit_no_sm_target),
    ("cuda_oom", _cuda_oom),
    ("illegal_memory_access", _illegal_memory_access),
    ("segfault", _segfault),
    ("cuda_graph_capture", _cuda_graph_capture),
    ("port_in_use", _port_in_use),
    ("nccl_error", _nccl_error),
    ("readiness_stall", _readiness_stall),
    ("readiness_timeout", _readiness_timeout),
    ("killed_by_signal", _killed_by_signal),
    ("slower_than_baseline", _slower_than_baseline),
)


def classify(
    log_text: str,
    *,
    exit_code: int | None = None,
    signal: int | None = None,
    metrics: list[dict] | None = None,
    baseline: dict | None = None,
    timed_out: bool = False,
) -> Classification | None:
    """The first matching signature's proposed verdict, or None when nothing known matches.

    baseline maps metric names to the baseline's values, e.g. {"output_throughput_tok_s": 82.0}.
    metrics are parsed metric lines ({"name", "value", "unit", "tags"}). timed_out: the trial ran past its
    time limit (a raw server log stopped in a startup phase is then a readiness stall).
    """
    trial = _Trial(log_text.splitlines(), exit_code, signal, list(metrics or []), baseline, timed_out)
    for _name, match in SIGNATURES:
        found = match(trial)
        if found is not None:
            return found
    return None


def metrics_from_log(log_text: str) -> list[dict]:
    """Metrics a log states: `@@campaign-metric` lines, else SGLang bench_serving's printed summary."""
    found = [m for m in (parse_metric_line(line) for line in log_text.splitlines()) if m is not None]
    if found:
        return found
    units = dict(SUMMARY_METRICS.values())
    return [
        {"name": name, "value": value, "unit": units.get(name, ""), "tags": {"source": "bench_serving summary"}}
        for name, value in parse_bench_stdout(log_text).items()
    ]
