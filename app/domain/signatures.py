"""Failure signatures: from a finished trial's log, exit status and metrics to a proposed verdict.

`classify` tries the signatures in SIGNATURE_TABLE order and returns the first that matches. The table
is data: most entries are `LinePattern`s (a regex, the cause and reason written from its match, the
stack components the verdict is bound to) read by one matcher (`Signature.match`); the few that weigh
more than one line read the trial themselves. The
order runs from the most specific evidence to the least, because one failure leaves several
traces: a torch symmetric-memory `KeyError: 12` also makes NCCL complain and the server miss
its readiness deadline; an out-of-memory error often surfaces again as an NCCL error.

  0. preflight_failed      a preflight check's `@@campaign-preflight {json}`      the check's own proposal
  1. unknown_flag          argparse `error: unrecognized arguments: --x`        retest    (sglang; vLLM's
                           api_server.py unbound)
  1b. model_path_missing   the vllm_server recipe's `model path not found`, or  retest
                           vLLM/transformers refusing a path that is no model
  2. module_not_installed  `ModuleNotFoundError: No module named 'mscclpp'`     deferred
  3. symm_mem_sm_keyerror  `KeyError: 12` in torch symmetric memory             dead_end  (torch, sm)
  4. jit_no_sm_target      nvcc / FlashInfer JIT without a target for the SM    dead_end  (cuda|flashinfer, sm)
  5. cuda_oom              `torch.OutOfMemoryError: CUDA out of memory`         dead_end
  5b. host_oom             a CPU engine's KV cache or weights beyond the host's dead_end
                           memory (vLLM CPU's own errors, torch's CPU allocator)
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

from app.protocol.metrics import MetricName, parse_metric_line
from app.protocol.preflight import PROPOSABLE_STATUSES, parse_preflight_line
from app.protocol.sglang_output import SUMMARY_METRICS, parse_bench_stdout

# The sglang_server and vllm_server recipes print this (their READY_TIMEOUT_MESSAGE):
#   sglang_server: server not ready within 1800s: no 'The server is fired up and ready to roll!' line
#   and GET /health never returned 200
#   vllm_server: server not ready within 600s: GET http://127.0.0.1:18000/health never returned 200
READINESS_TIMEOUT_RE = re.compile(
    r"(?:sglang|vllm)_server: server not ready within (?P<seconds>[0-9.]+)s\b"
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


@dataclass(frozen=True)
class LinePattern:
    """One way a signature shows in a log: the first line `regex` finds. `cause` and `reason` are
    templates over the match's named groups, {line} (the line, quoted short) and what `fields` derives
    from the match; `bound_to` names the stack components the verdict is only true for (version-bound)."""

    regex: re.Pattern[str]
    cause: str
    reason: str
    bound_to: tuple[str, ...] = ()
    fields: Callable[[re.Match[str]], dict[str, str]] | None = None


@dataclass(frozen=True)
class Signature:
    """One entry of the table: its name, the verdict it proposes (None: the evidence says, as a preflight
    record does), and its patterns, tried in order over the whole log; or `read`, for a signature that
    weighs more than one line."""

    name: str
    verdict: str | None
    patterns: tuple[LinePattern, ...] = ()
    read: Callable[[_Trial], Classification | None] | None = None

    def match(self, t: _Trial) -> Classification | None:
        if self.read is not None:
            return self.read(t)
        for pattern in self.patterns:
            found = _find(t.lines, pattern.regex)
            if found is None:
                continue
            index, m = found
            values = {k: v or "" for k, v in m.groupdict().items()}
            values["line"] = _quote(t.lines[index])
            if pattern.fields is not None:
                values.update(pattern.fields(m))
            assert self.verdict is not None  # a pattern entry proposes its own verdict
            return Classification(
                self.name,
                pattern.cause.format(**values),
                self.verdict,
                pattern.reason.format(**values),
                _bound(*pattern.bound_to) if pattern.bound_to else None,
                t.lines[index],
            )
        return None


# --- the signatures that read the trial themselves, and the patterns of the rest ------------------

_PREFLIGHT_ERROR = re.compile(r"\b\w*Error\b|\berror:|\bfatal\b")


def _preflight_failed(t: _Trial) -> Classification | None:
    for line in t.lines:
        record = parse_preflight_line(line)
        if record is None or record.get("verdict") not in PROPOSABLE_STATUSES or not record.get("cause"):
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
# vLLM's OpenAI server (`python -m vllm.entrypoints.openai.api_server`) names itself api_server.py.
_UNRECOGNIZED_VLLM = re.compile(r"(?P<prog>api_server\.py|vllm): error: unrecognized arguments: (?P<args>.+)$")

# runners/recipes/vllm_server.py MODEL_MISSING_MESSAGE, and what vLLM / transformers say of a path that is no model.
_MODEL_MISSING = re.compile(
    r"vllm_server: model path not found: (?P<path>.+)$"
    r"|Repo id must be in the form 'repo_name' or 'namespace/repo_name': '(?P<path2>[^']+)'"
    r"|Invalid repository ID or local directory specified: '(?P<path3>[^']+)'"
    r"|(?P<path4>\S+) does not appear to have a file named config\.json"
)

# A CPU engine past the host's memory: vLLM CPU's checks (cpu_worker.py, kv_cache_utils.py) and torch's allocator.
_HOST_OOM = re.compile(
    r"is less than desired CPU memory utilization"
    r"|on kv cache allocation is less than requested memory for kv"
    r"|No available memory for the cache blocks"
    r"|DefaultCPUAllocator: (?:can't allocate memory|not enough memory)"
)


_NO_MODULE = re.compile(r"ModuleNotFoundError: No module named '(?P<module>[\w.]+)'")


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


# The error itself, not advice that mentions it ("lower --mem-fraction-static to avoid CUDA out of memory").
_OOM = re.compile(
    r"OutOfMemoryError: CUDA out of memory\.?(?: Tried to allocate (?P<size>[\d.]+ [KMGT]i?B))?"
    r"|CUDA out of memory\. Tried to allocate (?P<size2>[\d.]+ [KMGT]i?B)"
    r"|CUDA error: out of memory|Cuda failure 'out of memory'|cudaErrorMemoryAllocation"
)


_ILLEGAL = re.compile(r"an illegal memory access was encountered|cudaErrorIllegalAddress|CUDA_ERROR_ILLEGAL_ADDRESS")


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


_PORT = re.compile(
    r"\[Errno 98\].*address already in use|EADDRINUSE|address already in use \(errno: 98\)", re.IGNORECASE
)


_NCCL = re.compile(
    r"Watchdog caught collective operation timeout|NCCL WARN|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|"
    r"ncclRemoteError|ncclInvalidUsage|NCCL error|DistBackendError"
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
_OWN_LINE = re.compile(r"^(?:sglang_server: |vllm_server: |@@campaign-|preflight: |    )")
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


def _oom_size(m: re.Match[str]) -> dict[str, str]:
    size = m.group("size") or m.group("size2")
    return {"size": f" (tried to allocate {size})" if size else ""}


# The table, in the order `classify` tries it. Most entries are data: the first log line a pattern finds,
# with its cause and reason written from the match (`LinePattern`); the few that weigh more than one line
# (a preflight record, a KeyError with its traceback, an exit status, a stall's last line, metrics) read
# the trial themselves.
SIGNATURE_TABLE: tuple[Signature, ...] = (
    Signature("preflight_failed", None, read=_preflight_failed),
    Signature(
        "unknown_flag",
        "retest",
        (
            LinePattern(
                _UNRECOGNIZED_VLLM,
                "flag not supported by this vLLM: {flags}",
                '{prog} rejected {flags} ("{line}"); the approach was not tried. '
                "Re-test with a vLLM that has the flag, or with the flag this version spells differently.",
                fields=lambda m: {"flags": m.group("args").strip()},
            ),
            LinePattern(
                _UNRECOGNIZED,
                "flag not supported by this sglang: {flags}",
                '{prog} rejected {flags} ("{line}"); the approach was not tried. '
                "Re-test with an sglang that has the flag, or with the flag this version spells differently.",
                ("sglang",),
                lambda m: {"flags": m.group("args").strip()},
            ),
        ),
    ),
    Signature(
        "model_path_missing",
        "retest",
        (
            LinePattern(
                _MODEL_MISSING,
                "model path missing: {path}",
                'The server was given a model it cannot find ("{line}"); the approach was not tried. '
                "Fix the path (on this node) and run again.",
                fields=lambda m: {"path": next(p for p in m.groups() if p).strip()},
            ),
        ),
    ),
    Signature(
        "module_not_installed",
        "deferred",
        (
            LinePattern(
                _NO_MODULE,
                "{module} not installed; needs a build",
                'The trial stopped at "{line}": {package} is not installed on this node.',
                fields=lambda m: {"package": m.group("module").split(".")[0]},
            ),
        ),
    ),
    Signature("symm_mem_sm_keyerror", "dead_end", read=_symm_mem_sm_keyerror),
    Signature(
        "jit_no_sm_target",
        "dead_end",
        (
            LinePattern(
                _NVCC_ARCH,
                "the CUDA compiler cannot target {arch}",
                'A JIT kernel build failed: "{line}". This nvcc does not know the GPU\'s architecture; '
                "a newer CUDA toolkit may.",
                ("cuda", "sm"),
            ),
            LinePattern(
                _JIT_NO_TARGET,
                "no kernel build target for SM {sm}",
                'The kernel JIT has no target for this GPU: "{line}". A newer FlashInfer/CUDA may add it.',
                ("flashinfer", "cuda", "sm"),
                lambda m: {"sm": m.group("sm") or m.group("sm2")},
            ),
        ),
    ),
    Signature(
        "cuda_oom",
        "dead_end",
        (
            LinePattern(
                _OOM,
                "CUDA out of memory{size}",
                'The GPU ran out of memory: "{line}". The approach does not fit beside the model at these settings.',
                fields=_oom_size,
            ),
        ),
    ),
    Signature(
        "illegal_memory_access",
        "dead_end",
        (
            LinePattern(
                _ILLEGAL,
                "a GPU kernel made an illegal memory access",
                'A kernel faulted: "{line}": a bug in this stack\'s kernels for this GPU, '
                "which another torch/sglang build may not have.",
                ("torch", "sglang", "sm"),
            ),
        ),
    ),
    Signature(
        "host_oom",
        "dead_end",
        (
            LinePattern(
                _HOST_OOM,
                "out of host memory (the engine's KV cache or weights)",
                'The engine ran out of host memory: "{line}". The approach does not fit in this node\'s memory at '
                "these settings (on a CPU build, VLLM_CPU_KVCACHE_SPACE sizes the KV cache).",
            ),
        ),
    ),
    Signature("segfault", "inconclusive", read=_segfault),
    Signature(
        "cuda_graph_capture",
        "dead_end",
        (
            LinePattern(
                _GRAPH_CAPTURE,
                "incompatible with CUDA graphs (capture failed)",
                'CUDA graph capture failed: "{line}". The fast decode path needs CUDA graphs, so '
                "this setting cannot be used with it on this stack.",
                ("nccl", "torch"),
            ),
        ),
    ),
    Signature(
        "port_in_use",
        "retest",
        (
            LinePattern(
                _PORT,
                "port already in use",
                'A port the trial needed was taken: "{line}" (a previous server still running?). '
                "The approach was not tried; free the port and run again.",
            ),
        ),
    ),
    Signature(
        "nccl_error",
        "inconclusive",
        (
            LinePattern(
                _NCCL,
                "{what}",
                'NCCL failed: "{line}". This may be the approach\'s setting or a hang elsewhere; '
                "look at the lines before it (NCCL_DEBUG=INFO shows the transport).",
                ("nccl",),
                lambda m: {"what": "NCCL collective timed out" if "timeout" in m.group(0).lower() else "NCCL error"},
            ),
        ),
    ),
    Signature("readiness_stall", "inconclusive", read=_readiness_stall),
    Signature(
        "readiness_timeout",
        "inconclusive",
        (
            LinePattern(
                READINESS_TIMEOUT_RE,
                "server not ready within {seconds}s",
                'The server never became ready ("{line}") and printed no recognized error: '
                "it may hang at startup with this approach, or need longer to load.",
            ),
        ),
    ),
    Signature("killed_by_signal", "inconclusive", read=_killed_by_signal),
    Signature("slower_than_baseline", "dead_end", read=_slower_than_baseline),
)
# (name, matcher) in order: what `classify` walks.
SIGNATURES: tuple[tuple[str, Callable[[_Trial], Classification | None]], ...] = tuple(
    (entry.name, entry.match) for entry in SIGNATURE_TABLE
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
