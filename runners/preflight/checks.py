"""The built-in preflight checks, in the order they run (cheapest and most decisive first).

GPU facts come from the node's sglang interpreter (`probes.py`), never from the runner's python:
the server will run with that interpreter's torch, CUDA and sglang.
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Callable

from runners.preflight.registry import Context, Outcome, register
from runners.recipes import runners_path
from runners.recipes._sglang_launch import run_merged, server_argv


def run_probe(ctx: Context, *args: str) -> tuple[int, str]:
    """Run `python -m runners.preflight.probes ARGS` with the node's sglang interpreter; (exit code, output)."""
    env = dict(ctx.env)
    rest = env.get("PYTHONPATH")
    env["PYTHONPATH"] = runners_path() + (os.pathsep + rest if rest else "")
    argv = [ctx.python, "-m", "runners.preflight.probes", *args]
    try:
        code, out = run_merged(argv, env=env, timeout_s=ctx.timeout_s, start_new_session=True)
    except OSError as exc:
        return 127, f"cannot run {ctx.python!r}: {exc}"
    if code is None:
        return 124, out + f"\npreflight probe {args[0]} did not finish within {ctx.timeout_s:g}s"
    return code, out


_NO_GPU = re.compile(r"preflight probe: (no CUDA GPU visible|needs \d+ GPUs|torch is not importable)")


def _no_gpu(output: str, what: str) -> Outcome | None:
    m = _NO_GPU.search(output)
    if not m:
        return None
    return Outcome.failed(
        "retest",
        f"{what} not checked: {m.group(1)} on this node",
        output=output,
        summary=f"{what} cannot be checked here ({m.group(1)}); run the approach on a node with GPUs",
    )


# --- node-local facts --------------------------------------------------------------------------


def _is_local_path(path: str) -> bool:
    return path.startswith(("/", "./", "../", "~")) or os.path.exists(path)


@register()
def model_path(ctx: Context) -> Outcome:
    """The model (and draft model) directories exist and are readable (hub ids are left to sglang)."""
    seen = []
    for key in ("model_path", "speculative_draft_model_path"):
        path = ctx.values.get(key)
        if not path:
            continue
        if not _is_local_path(path):
            seen.append(f"{path} (hub id)")
            continue
        path = os.path.expanduser(path)
        if not os.path.isdir(path):
            return Outcome.failed("retest", f"{key.replace('_', ' ')} {path} is not a directory on this node")
        if not os.access(path, os.R_OK | os.X_OK):
            return Outcome.failed("retest", f"{key.replace('_', ' ')} {path} is not readable by this runner")
        if not os.path.isfile(os.path.join(path, "config.json")):
            return Outcome.failed("retest", f"{key.replace('_', ' ')} {path} has no config.json")
        seen.append(path)
    return Outcome.passed(", ".join(seen) or "no local paths")


@register()
def port_free(ctx: Context) -> Outcome:
    """The server's port is free on its host."""
    host, port = ctx.values.get("host", "127.0.0.1"), int(ctx.values.get("port", 30000))
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            return Outcome.failed("retest", f"port {port} on {host} is not free: {exc}")
    return Outcome.passed(f"{host}:{port} free")


# --- the installed sglang ---------------------------------------------------------------------

_UNRECOGNIZED = re.compile(r"error: unrecognized arguments: (?P<args>.+)$", re.MULTILINE)
_ARG_ERROR = re.compile(r"error: (?P<msg>.+)$", re.MULTILINE)


def launch_args(ctx: Context) -> list[str]:
    argv = server_argv(ctx.values)
    return argv[3:]  # drop `python -m sglang.launch_server`


@register()
def sglang_flags(ctx: Context) -> Outcome:
    """The launch flags parse with the node's installed sglang (its own ServerArgs CLI definition)."""
    code, output = run_probe(ctx, "flags", "--", *launch_args(ctx))
    version = ctx.sglang_version or "unknown"
    if code == 0:
        return Outcome.passed(f"sglang {version} parses the launch flags", output)
    m = _UNRECOGNIZED.search(output)
    if m:
        flags = m.group("args").strip()
        return Outcome.failed(
            "retest",
            f"flag not supported by this sglang: {flags}",
            bound_to=["sglang"],
            output=output,
            summary=f"sglang {version} does not know {flags}: re-test with an sglang that has it",
        )
    m = _ARG_ERROR.search(output)
    if m:
        return Outcome.failed(
            "retest",
            f"sglang {version} rejects the launch arguments: {m.group('msg')}",
            bound_to=["sglang"],
            output=output,
        )
    return Outcome.failed(
        "retest", f"cannot check the flags against sglang with {ctx.python} (exit {code})", output=output
    )


# --- NCCL environment ---------------------------------------------------------------------------

# Names documented in NCCL's environment-variable reference (2.2x); a name outside it is a typo
# NCCL silently ignores, so the trial would not test what the approach says.
NCCL_NAMES = {
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS",
    "NCCL_MIN_CTAS",
    "NCCL_MAX_CTAS",
    "NCCL_P2P_LEVEL",
    "NCCL_P2P_DISABLE",
    "NCCL_P2P_READ_ENABLE",
    "NCCL_P2P_NET_CHUNKSIZE",
    "NCCL_P2P_PCI_CHUNKSIZE",
    "NCCL_P2P_NVL_CHUNKSIZE",
    "NCCL_P2P_USE_CUDA_MEMCPY",
    "NCCL_SHM_DISABLE",
    "NCCL_SHM_USE_CUDA_MEMCPY",
    "NCCL_NET_GDR_LEVEL",
    "NCCL_NET_GDR_READ",
    "NCCL_NET",
    "NCCL_NET_PLUGIN",
    "NCCL_IB_DISABLE",
    "NCCL_IB_HCA",
    "NCCL_IB_GID_INDEX",
    "NCCL_IB_TIMEOUT",
    "NCCL_IB_RETRY_CNT",
    "NCCL_SOCKET_IFNAME",
    "NCCL_SOCKET_FAMILY",
    "NCCL_SOCKET_NTHREADS",
    "NCCL_NSOCKS_PERTHREAD",
    "NCCL_BUFFSIZE",
    "NCCL_NTHREADS",
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_DEBUG_FILE",
    "NCCL_NVLS_ENABLE",
    "NCCL_CUMEM_ENABLE",
    "NCCL_CUMEM_HOST_ENABLE",
    "NCCL_LAUNCH_MODE",
    "NCCL_GRAPH_MIXING_SUPPORT",
    "NCCL_GRAPH_REGISTER",
    "NCCL_LOCAL_REGISTER",
    "NCCL_CROSS_NIC",
    "NCCL_COLLNET_ENABLE",
    "NCCL_TOPO_FILE",
    "NCCL_TOPO_DUMP_FILE",
    "NCCL_IGNORE_CPU_AFFINITY",
    "NCCL_CHECKS_DISABLE",
    "NCCL_CHECK_POINTERS",
    "NCCL_COMM_BLOCKING",
    "NCCL_RUNTIME_CONNECT",
    "NCCL_NVB_DISABLE",
    "NCCL_PXN_DISABLE",
    "NCCL_P2P_PXN_LEVEL",
    "NCCL_WORK_FIFO_DEPTH",
    "NCCL_SET_STACK_SIZE",
    "NCCL_SET_THREAD_NAME",
    "NCCL_GRAPH_FILE",
    "NCCL_GRAPH_DUMP_FILE",
    "NCCL_NET_SHARED_BUFFERS",
    "NCCL_NET_SHARED_COMMS",
    "NCCL_TUNER_PLUGIN",
    "NCCL_PROFILER_PLUGIN",
    "NCCL_NVLS_CHUNKSIZE",
    "NCCL_CONF_FILE",
    "NCCL_HOSTID",
    "NCCL_MNNVL_ENABLE",
    "NCCL_NCHANNELS_PER_NET_PEER",
    "NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_BLOCKING_WAIT",  # read by torch's ProcessGroupNCCL, not NCCL
}
NCCL_ALGOS = {"ring", "tree", "collnet", "collnetdirect", "collnetchain", "nvls", "nvlstree", "pat"}
NCCL_PROTOS = {"ll", "ll128", "simple"}
NCCL_P2P_LEVELS = {"LOC", "NVL", "PIX", "PXB", "PHB", "SYS"}
_INT = re.compile(r"^-?\d+$")


def _token_list(value: str) -> list[str]:
    value = value[1:] if value.startswith("^") else value
    tokens = []
    for part in value.split(";"):  # "allreduce:tree;broadcast:ring" form
        part = part.split(":", 1)[-1]
        tokens += [t.strip() for t in part.split(",") if t.strip()]
    return tokens


def nccl_env_problems(env: dict[str, str]) -> list[str]:
    problems = []
    for name, value in sorted(env.items()):
        if not name.startswith("NCCL_"):
            continue
        if name not in NCCL_NAMES:
            problems.append(f"{name}: not a variable NCCL reads (a typo is silently ignored)")
        elif name == "NCCL_ALGO" and (bad := [t for t in _token_list(value) if t.lower() not in NCCL_ALGOS]):
            problems.append(f"NCCL_ALGO={value}: unknown algorithm(s) {', '.join(bad)}")
        elif name == "NCCL_PROTO" and (bad := [t for t in _token_list(value) if t.lower() not in NCCL_PROTOS]):
            problems.append(f"NCCL_PROTO={value}: unknown protocol(s) {', '.join(bad)}")
        elif (
            name in ("NCCL_P2P_LEVEL", "NCCL_NET_GDR_LEVEL") and value not in NCCL_P2P_LEVELS and not _INT.match(value)
        ):
            problems.append(f"{name}={value}: expected one of {', '.join(sorted(NCCL_P2P_LEVELS))} or a number")
        elif name.endswith(("_NCHANNELS", "_CTAS", "_BUFFSIZE", "_NTHREADS", "_DISABLE", "_ENABLE")) and not _INT.match(
            value
        ):
            problems.append(f"{name}={value}: expected an integer")
    return problems


@register()
def nccl_env(ctx: Context) -> Outcome:
    """NCCL_* variables are names NCCL reads, with values it accepts."""
    names = sorted(k for k in ctx.env if k.startswith("NCCL_"))
    problems = nccl_env_problems(ctx.env)
    if problems:
        return Outcome.failed(
            "retest", "NCCL environment: " + "; ".join(problems), bound_to=["nccl"], output="\n".join(problems)
        )
    return Outcome.passed(", ".join(f"{k}={ctx.env[k]}" for k in names) or "no NCCL_* variables")


# --- GPU checks (through the node's interpreter) -----------------------------------------------


def _model_bytes(path: str | None) -> int:
    if not path or not os.path.isdir(os.path.expanduser(path)):
        return 0
    total = 0
    for entry in os.scandir(os.path.expanduser(path)):
        if entry.is_file() and entry.name.endswith((".safetensors", ".bin", ".pt", ".gguf")):
            total += entry.stat().st_size
    return total


@register()
def gpu_memory(ctx: Context) -> Outcome:
    """Enough GPUs with enough free memory for the model's weights at the approach's TP size."""
    code, output = run_probe(ctx, "gpus")
    lines = [ln for ln in output.splitlines() if ln.startswith("{")]
    if code != 0 or not lines:
        return _no_gpu(output, "GPU memory") or Outcome.failed(
            "retest", f"cannot list the node's GPUs with {ctx.python} (exit {code})", output=output
        )
    gpus = json.loads(lines[-1])["gpus"]
    if len(gpus) < ctx.tp_size:
        return Outcome.failed(
            "retest", f"TP {ctx.tp_size} needs {ctx.tp_size} GPUs; this node has {len(gpus)}", output=output
        )
    weights = _model_bytes(ctx.values.get("model_path")) + _model_bytes(ctx.values.get("speculative_draft_model_path"))
    need = weights / ctx.tp_size
    short = [g for g in gpus[: ctx.tp_size] if g["free_bytes"] < need]
    gib = 2**30
    if short:
        detail = ", ".join(f"GPU {g['index']} {g['free_bytes'] / gib:.1f} GiB free" for g in short)
        return Outcome.failed(
            "retest",
            f"not enough free GPU memory for {weights / gib:.1f} GiB of weights at TP "
            f"{ctx.tp_size} ({need / gib:.1f} GiB per GPU): {detail}",
            output=output,
        )
    least = min(g["free_bytes"] for g in gpus[: ctx.tp_size])
    return Outcome.passed(f"{ctx.tp_size} GPUs, least free {least / gib:.1f} GiB, weights {need / gib:.1f} GiB per GPU")


def _needs_jit(ctx: Context) -> bool:
    return any("flashinfer" in a for a in ctx.server_args) or ctx.env.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE") == "1"


_NVCC_ARCH = re.compile(r"Unsupported gpu architecture '(?P<arch>[\w]+)'")


def _probe_outcome(
    ctx: Context, args: tuple[str, ...], passed: str, what: str, failure: Callable[[str], tuple[str, list[str]]]
) -> Outcome:
    """A GPU probe's outcome: passed on exit 0; a node without the GPUs it needs; else a dead end, its summary and
    what it is bound to read from the probe's output by `failure`."""
    code, output = run_probe(ctx, *args)
    if code == 0:
        return Outcome.passed(passed, output)
    if failed := _no_gpu(output, what):
        return failed
    summary, bound_to = failure(output)
    return Outcome.failed("dead_end", summary, bound_to=bound_to, output=output)


def _jit_failure(output: str) -> tuple[str, list[str]]:
    if m := _NVCC_ARCH.search(output):
        return f"the CUDA compiler cannot target {m.group('arch')}", ["cuda", "sm"]
    return "JIT kernels cannot be built for this GPU on this node", ["cuda", "flashinfer", "sm"]


@register(applies=_needs_jit)
def jit_target(ctx: Context) -> Outcome:
    """The node's nvcc can build kernels for the GPU's SM (FlashInfer / sglang JIT kernels need it)."""
    return _probe_outcome(ctx, ("jit_target",), "nvcc targets the GPU", "JIT targets", _jit_failure)


_KEYERROR = re.compile(r"^KeyError: (?P<sm>\d+)\s*$", re.MULTILINE)


def _rank_count(ctx: Context) -> int:
    return min(2, ctx.tp_size) if ctx.tp_size > 1 else 2


def _symm_mem_failure(output: str) -> tuple[str, list[str]]:
    if m := _KEYERROR.search(output):
        sm = m.group("sm")
        return f"torch symmetric memory has no entry for SM {sm} (GPU architecture not supported)", ["torch", "sm"]
    return "torch symmetric memory rendezvous or allreduce failed on this node", ["torch", "nccl", "sm"]


@register(applies=lambda ctx: ctx.has_flag("--enable-torch-symm-mem"))
def symm_mem(ctx: Context) -> Outcome:
    """torch symmetric memory: a two-rank rendezvous and one allreduce (and sglang's per-SM size table)."""
    args = ("symm_mem", "--world-size", str(_rank_count(ctx)))
    return _probe_outcome(
        ctx, args, "rendezvous and one_shot_all_reduce on 2 ranks", "torch symmetric memory", _symm_mem_failure
    )


@register(applies=lambda ctx: ctx.uses_cuda_graphs and ctx.tp_size > 1)
def graph_collective(ctx: Context) -> Outcome:
    """CUDA graph capture of one NCCL allreduce, with the approach's NCCL environment."""
    args = ("graph_collective", "--world-size", str(_rank_count(ctx)))
    failure = ("incompatible with CUDA graphs (capture failed)", ["nccl", "torch"])
    return _probe_outcome(ctx, args, "captured and replayed one all_reduce", "CUDA graph capture", lambda _: failure)
