"""Issue 43, item 16: a SIGTERM that lands while a wrapper spawns its child never leaves the child running.

The command recipe's wrapper and the collective recipes' rank launcher install their handlers before they
spawn. Each test makes the window certain, not likely: `subprocess.Popen` is wrapped so the wrapper sends
itself SIGTERM the moment the child exists, before the spawning call returns. Before the fix the
wrapper died of it and the child slept on. Real processes; no timing assumptions beyond generous bounds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.support.paths import ROOT

PY = sys.executable

# Runs the wrapper in a process of its own, its Popen sending SIGTERM to that process right after each spawn
# and writing each child's pid to PIDS (one a line).
HARNESS = textwrap.dedent(
    """
    import os, signal, subprocess, sys
    PIDS = sys.argv[1]
    real = subprocess.Popen

    class Late(real):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            with open(PIDS, "a") as out:
                out.write(f"{self.pid}\\n")
            if os.environ.get("LATE_SIGNAL_SENT") != "1":
                os.environ["LATE_SIGNAL_SENT"] = "1"
                os.kill(os.getpid(), signal.SIGTERM)  # the child exists; its wrapper does not hold it yet

    subprocess.Popen = Late
    """
)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _gone(pids: list[int], within_s: float = 15.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def _run(tmp_path: Path, body: str) -> tuple[subprocess.CompletedProcess, list[int]]:
    pids = tmp_path / "pids"
    script = HARNESS + textwrap.dedent(body)
    done = subprocess.run(
        [PY, "-c", script, str(pids)], cwd=ROOT, capture_output=True, text=True, timeout=60, env={**os.environ}
    )
    found = [int(line) for line in pids.read_text().split()] if pids.exists() else []
    return done, found


def _kill(pids: list[int]) -> None:
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_the_command_wrapper_forwards_a_sigterm_that_lands_during_the_spawn(tmp_path):
    done: subprocess.CompletedProcess | None = None
    pids: list[int] = []
    try:
        done, pids = _run(
            tmp_path,
            """
            from runners.recipes import command
            sys.exit(command.main(["--", sys.executable, "-c", "import time; time.sleep(60)"]))
            """,
        )
        assert done is not None and len(pids) == 1, done.stderr
        assert _gone(pids), f"the child {pids[0]} outlived its wrapper (exit {done.returncode}): {done.stderr}"
        assert done.returncode == 128 + signal.SIGTERM, done.stderr  # the child's end, as the wrapper reports it
    finally:
        _kill(pids)


def test_the_rank_launcher_stops_its_ranks_on_a_sigterm_during_the_spawn(tmp_path):
    done: subprocess.CompletedProcess | None = None
    pids: list[int] = []
    try:
        done, pids = _run(
            tmp_path,
            """
            from runners.recipes import _dist
            sys.exit(_dist.launch_ranks(
                "test", "http.server", ["0", "--bind", "127.0.0.1"], 3, run_timeout_s=60, teardown_timeout_s=5
            ))
            """,
        )
        assert done is not None and len(pids) == 1, f"a rank was spawned after the signal: {pids} {done.stderr}"
        assert _gone(pids), f"rank {pids[0]} outlived its launcher (exit {done.returncode}): {done.stderr}"
        assert done.returncode == 128 + signal.SIGTERM and "while starting the ranks: stopped them" in done.stderr
    finally:
        _kill(pids)
