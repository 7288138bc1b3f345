"""Property 8: trials cannot escape. A descendant that double-forks, calls setsid and execs with an
empty environment (so it carries no attempt marker, is in no trial group or session, and is not the
trial leader's descendant any more) is still killed on cancel and when the trial exits; a process
outside the trial is never touched. Real processes, the runner's own TrialProcess.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import psutil
import pytest

from runners.process import TrialProcess
from runners.recipes import LaunchSpec
from tests.support.waiting import wait_for

PY = sys.executable
ESCAPE = """
    import os, sys, time
    pid_file = sys.argv[1]
    if os.fork() == 0:
        os.setsid()
        if os.fork() > 0:
            os._exit(0)
        # Empty environment: no CAMPAIGN_ATTEMPT_ID marker to be found by.
        os.execve(sys.executable, [sys.executable, "-c",
                  "import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                  "open(sys.argv[1], 'w').write(str(os.getpid()) + chr(10)); time.sleep(300)", pid_file], {})
    print("forked", flush=True)
    if sys.argv[2] == "stay":
        time.sleep(300)
"""
READY_THEN_SLEEP = "import sys, time; open(sys.argv[1], 'w').close(); time.sleep(300)"


def _wait_pid(path: Path) -> int:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().endswith("\n"):
            return int(path.read_text())
        time.sleep(0.02)
    raise AssertionError("the escaped process never started")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def bystander():
    """A process of the same user, in its own session, that no trial started: never touched."""
    proc = subprocess.Popen(
        [PY, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"],
        env={},
        start_new_session=True,
    )
    yield proc
    assert proc.poll() is None, "a process outside the trial was killed"
    proc.kill()
    proc.wait()


def _trial(tmp_path: Path, mode: str) -> tuple[TrialProcess, int]:
    pid_file = tmp_path / f"escaped-{uuid.uuid4().hex[:6]}"
    # poll_s long: the descendant poll never sees the escape; only the containment can find it.
    trial = TrialProcess(
        LaunchSpec(argv=[PY, "-c", textwrap.dedent(ESCAPE), str(pid_file), mode], timeout_s=120),
        f"escape-{uuid.uuid4().hex[:8]}",
        grace_s=0.5,
        poll_s=30.0,
    )
    trial.start()
    escaped = _wait_pid(pid_file)
    proc = psutil.Process(escaped)
    assert proc.environ() == {} and os.getsid(escaped) not in (trial.pid, os.getsid(0))
    assert escaped not in {p.pid for p in psutil.Process(trial.pid).children(recursive=True)}
    return trial, escaped


def test_escaped_descendant_is_killed_on_cancel(tmp_path, bystander):
    trial, escaped = _trial(tmp_path, "stay")
    trial.cancel()
    result = trial.wait()
    assert result.outcome == "cancelled"
    assert not _alive(escaped), f"escaped pid {escaped} survived the cancel"


def test_escaped_descendant_is_killed_when_the_trial_exits(tmp_path, bystander):
    trial, escaped = _trial(tmp_path, "exit")
    result = trial.wait()
    assert result.outcome == "exited" and result.exit_code == 0
    assert escaped in result.leftovers and "left" in result.error
    assert not _alive(escaped), f"escaped pid {escaped} survived the trial's exit"


def test_two_trials_each_kill_only_their_own(tmp_path):
    first, first_escaped = _trial(tmp_path, "stay")
    ready = tmp_path / "second-up"
    second = TrialProcess(
        LaunchSpec(argv=[PY, "-c", READY_THEN_SLEEP, str(ready)], timeout_s=120), "other", grace_s=0.5, poll_s=0.1
    )
    second.start()
    try:
        assert second.popen is not None
        wait_for(ready.exists, what="the second trial to run")
        assert second.popen.poll() is None
        first.cancel()
        first.wait()
        assert second.popen.poll() is None, "cancelling one trial killed another"
    finally:
        second.cancel(kill_now=True)
        second.wait()
    # The escaped orphan left every trial's session: the last trial to end took it.
    assert not _alive(first_escaped)
