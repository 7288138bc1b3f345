"""Trials as real process trees: groups, cancel with grace, escaped daemons, timeouts, output."""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest

from runners.process import (
    ATTEMPT_ENV,
    MAX_CARRY,
    MAX_SHOWN_COMMAND,
    LogChunker,
    OutputChunk,
    PhaseScanner,
    TrialProcess,
    check_gpus_released,
    gpu_memory_used,
    processes_with_marker,
    started_line,
)
from runners.recipes import LaunchSpec
from tests.support.trials import trial_output

PY = sys.executable


def _spec(code: str, timeout_s: float = 30.0, **kw) -> LaunchSpec:
    return LaunchSpec(argv=[PY, "-c", textwrap.dedent(code)], timeout_s=timeout_s, **kw)


class Collected:
    def __init__(self) -> None:
        self.chunks: list[OutputChunk] = []
        self.phases: list[str] = []
        self.lock = threading.Lock()

    def chunk(self, chunk: OutputChunk) -> None:
        with self.lock:
            self.chunks.append(chunk)

    @property
    def whole(self) -> str:
        return "".join(c.data for c in self.chunks)

    @property
    def text(self) -> str:
        """The trial's own output (after the runner's first line)."""
        return trial_output(self.whole)


_started: list[TrialProcess] = []


@pytest.fixture(autouse=True)
def _kill_what_a_failed_test_left():
    yield
    while _started:
        trial = _started.pop()
        if trial.popen is not None and trial.popen.returncode is None:
            trial.cancel(kill_now=True)
            trial.wait()


def _run(spec: LaunchSpec, grace_s: float = 2.0, **kw):
    out = Collected()
    trial = TrialProcess(
        spec, f"test-{uuid.uuid4().hex[:8]}", grace_s=grace_s, on_chunk=out.chunk, on_phase=out.phases.append, **kw
    )
    trial.start()
    _started.append(trial)
    return trial, out


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_for_file(path: Path, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text()
        time.sleep(0.02)
    raise AssertionError(f"{path} not written")


# ---- spawn, exit codes, signals, timeouts ---------------------------------------------------------


def test_trial_runs_in_its_own_session_and_process_group_with_the_attempt_marker():
    trial, out = _run(
        _spec(
            """
        import os
        print(os.getpid(), os.getpgid(0), os.getsid(0), os.environ.get("CAMPAIGN_ATTEMPT_ID"), os.environ.get("EXTRA"))
    """,
            env={"EXTRA": "from-recipe"},
        )
    )
    result = trial.wait()
    pid, pgid, sid, marker, extra = out.text.split()
    assert int(pid) == trial.pid == int(pgid) == int(sid) != os.getpgid(0)
    assert marker == trial.attempt_id and extra == "from-recipe"
    assert (result.outcome, result.exit_code, result.signal) == ("exited", 0, None)


def test_exit_code_and_signal_are_recorded():
    trial, _ = _run(_spec("import sys; sys.exit(3)"))
    assert (trial.wait().exit_code, trial.popen.returncode) == (3, 3)
    trial, _ = _run(_spec("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
    result = trial.wait()
    assert (result.outcome, result.exit_code, result.signal) == ("exited", None, signal.SIGKILL)


def test_cwd_is_used(tmp_path):
    trial, out = _run(_spec("import os; print(os.getcwd())", cwd=str(tmp_path)))
    trial.wait()
    assert out.text.strip() == str(tmp_path)


def test_the_runners_line_is_the_first_output_before_the_trial_prints_anything(tmp_path):
    go = tmp_path / "go"
    code = f"""
        import os, time
        while not os.path.exists({str(go)!r}): time.sleep(0.02)
        print("past the gate", flush=True)
    """
    trial, out = _run(_spec(code, cwd=str(tmp_path)))
    # start() delivered it itself: the trial is still waiting at its gate and has printed nothing.
    assert not go.exists() and trial.popen.poll() is None
    assert [(c.offset, c.data) for c in out.chunks] == [
        (0, f"[runner] started pid {trial.pid} in {tmp_path}: {PY} -c 'import os, time ...' (4 lines)\n")
    ]
    go.write_text("go")
    assert trial.wait().exit_code == 0
    assert out.text == "past the gate\n"
    assert out.chunks[1].offset == out.chunks[0].nbytes  # the trial's bytes follow the runner's line


def test_the_runners_line_is_one_line_whatever_the_arguments():
    spec = LaunchSpec(
        argv=["/envs/sglang/bin/python", "-m", "runners.recipes.command", "--", "echo", "a b", "tab\there"]
    )
    assert started_line(spec, 7) == (
        "[runner] started pid 7: /envs/sglang/bin/python -m runners.recipes.command -- echo 'a b' 'tab\\there'\n"
    )
    long = started_line(LaunchSpec(argv=["prog", "x" * 500, *(["y" * 100] * 30)]), 7)
    assert long.count("\n") == 1 and "'" + "x" * 60 + " ...' (500 characters)" in long
    assert long.endswith(" more characters)\n") and len(long) < MAX_SHOWN_COMMAND + 100


def test_a_program_that_does_not_exist_fails_to_start():
    trial = TrialProcess(LaunchSpec(argv=["/nonexistent/program"]), "a1")
    with pytest.raises(OSError):
        trial.start()


def test_timeout_stops_the_trial_and_says_so():
    trial, out = _run(_spec("import time; print('up', flush=True); time.sleep(60)", timeout_s=0.5), grace_s=2)
    result = trial.wait()
    assert result.outcome == "timed_out"
    # Stopped in its sleep by the runner's SIGTERM (a trial that slept its 60 s would have exited 0).
    assert result.signal == signal.SIGTERM and result.exit_code is None
    assert "timed out after 0.5 s" in result.error
    assert out.text == "up\n"


# ---- cancel reaches the whole tree, escaped daemons included ----------------------------------------

TREE = """
    import os, signal, sys, time
    pids = sys.argv[1]
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = os.fork()
    if child == 0:  # a child in the group that ignores SIGTERM
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True: time.sleep(1)
    first = os.fork()
    if first == 0:  # double fork + setsid: the grandchild leaves the group and the session
        os.setsid()
        if os.fork() > 0:
            os._exit(0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with open(pids + ".daemon", "w") as f:
            f.write(f"{os.getpid()}\\n")
        while True: time.sleep(1)
    os.waitpid(first, 0)
    with open(pids, "w") as f:
        f.write(f"{os.getpid()} {child}\\n")
    print("tree up", flush=True)
    while True: time.sleep(1)
"""


class FakeClock:
    """runners.process's clock in a test: time moves only when the code sleeps (a real millisecond, so
    the processes still run), and every signal the trial sends is noted with the clock's reading."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.signals: list[tuple[int, float]] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        time.sleep(0.001)

    def time(self) -> float:
        return time.time()

    def time_ns(self) -> int:
        return time.time_ns()


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    """The FakeClock runners.process runs on, noting the signals its trials send."""
    import runners.process as process

    fake = FakeClock()
    monkeypatch.setattr(process, "time", fake)
    real_kill, real_group = process.kill_processes, TrialProcess._signal_group

    def kill_processes(targets, sig):
        fake.signals.append((sig, fake.now))
        return real_kill(targets, sig)

    def signal_group(self, sig, targets):
        fake.signals.append((sig, fake.now))
        return real_group(self, sig, targets)

    monkeypatch.setattr(process, "kill_processes", kill_processes)
    monkeypatch.setattr(TrialProcess, "_signal_group", signal_group)
    return fake


def test_cancel_kills_a_tree_that_ignores_sigterm_and_a_daemonized_grandchild(tmp_path, clock):
    pid_file = tmp_path / "pids"
    spec = LaunchSpec(argv=[PY, "-c", textwrap.dedent(TREE), str(pid_file)], timeout_s=60)
    trial, out = _run(spec, grace_s=1.0)
    leader, child = map(int, _wait_for_file(pid_file).split())
    daemon = int(_wait_for_file(Path(str(pid_file) + ".daemon")))
    assert psutil.Process(daemon).ppid() != leader and os.getpgid(daemon) != leader  # really escaped
    trial.cancel()
    result = trial.wait()
    assert result.outcome == "cancelled"
    assert result.signal == signal.SIGKILL  # it ignored SIGTERM for the whole grace period
    term = min(at for sig, at in clock.signals if sig == signal.SIGTERM)
    kill = min(at for sig, at in clock.signals if sig == signal.SIGKILL)
    assert kill - term >= 1.0, "SIGKILL came before the grace period was over"
    assert kill - term <= 1.0 + 0.1, "SIGKILL came long after the grace period"  # one 50 ms poll, at most
    for pid in (leader, child, daemon):
        assert _gone(pid), f"pid {pid} survived the cancel"
    assert "tree up" in out.text


def test_marker_scan_finds_a_daemon_the_descendant_poll_never_saw(tmp_path):
    # The daemon is started outside the trial (so no descendant poll can see it) but carries the
    # attempt's marker, as a daemonized grandchild does.
    attempt = f"marker-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, **{ATTEMPT_ENV: attempt})
    import subprocess

    daemon = subprocess.Popen(
        [PY, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"],
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 5
        while not any(p.pid == daemon.pid for p in processes_with_marker(attempt)):
            assert time.monotonic() < deadline, "marker scan did not find the process"
            time.sleep(0.05)
        trial = TrialProcess(_spec("print('done')"), attempt, grace_s=0.5)
        trial.start()
        result = trial.wait()
        assert result.outcome == "exited" and result.exit_code == 0
        assert result.leftovers == [daemon.pid]
        assert "left 1 process(es) running" in result.error
        assert daemon.wait(timeout=5) == -signal.SIGKILL
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()


def test_leftovers_of_a_trial_that_exited_are_killed():
    trial, _ = _run(
        _spec("""
        import subprocess, sys
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdout=subprocess.DEVNULL)
        print(p.pid, flush=True)
    """),
        grace_s=2,
    )
    result = trial.wait()
    assert result.outcome == "exited" and result.exit_code == 0
    assert len(result.leftovers) == 1 and _gone(result.leftovers[0])


def test_cancel_with_kill_now_does_not_wait_for_the_grace_period(clock):
    trial, out = _run(
        _spec(
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('x', flush=True); time.sleep(60)"
        ),
        grace_s=30,
    )
    for _ in range(500):
        if out.text:
            break
        time.sleep(0.02)
    assert out.text == "x\n"
    trial.cancel(kill_now=True)
    result = trial.wait()
    assert result.outcome == "cancelled" and result.signal == signal.SIGKILL
    # No SIGTERM and no grace period: SIGKILL first, before the clock moved at all.
    assert clock.signals and {sig for sig, _ in clock.signals} == {signal.SIGKILL}
    assert {at for _, at in clock.signals} == {1000.0}


def test_never_kills_a_process_whose_pid_was_reused():
    from runners.process import ProcessId, kill_processes

    me = psutil.Process()
    impostor = ProcessId(me.pid, me.create_time() - 100.0)  # same pid, different start time
    assert impostor.process() is None
    assert kill_processes([impostor], signal.SIGKILL) == 0


# ---- output ---------------------------------------------------------------------------------------


def test_output_bytes_offsets_and_multibyte_characters_survive_split_writes():
    # Each write ends mid-character; sleeps make each write its own read.
    code = """
        import os, time
        parts = [b"plain line\\n", b"caf\\xc3", b"\\xa9 \\xe2\\x82", b"\\xac euro\\n", b"\\xf0\\x9f", b"\\x9a\\x80 rocket", b" no newline"]
        for part in parts:
            os.write(1, part)
            time.sleep(0.25)
        os.write(2, b"to stderr\\n")
    """
    trial, out = _run(_spec(code), flush_after_s=0.05)
    trial.wait()
    expected = "plain line\ncafé € euro\n🚀 rocket no newlineto stderr\n"
    assert out.text == expected
    offset = 0
    for chunk in out.chunks:
        assert chunk.offset == offset
        assert len(chunk.data.encode()) == chunk.nbytes
        offset += chunk.nbytes
    assert offset == len(out.whole.encode()) and out.whole.endswith(expected)
    assert "\ufffd" not in out.text
    assert len(out.chunks) >= 4  # delivered as it came, not at the end


def test_chunks_end_at_a_newline_when_there_is_one():
    chunker = LogChunker()
    assert chunker.feed(b"") == []
    first = chunker.feed(b"a\nb\nc")
    assert [c.data for c in first] == ["a\nb\n"] and chunker.pending == 1
    second = chunker.feed(b"d\ne")
    assert [(c.offset, c.data) for c in second] == [(4, "cd\n")]
    assert [(c.offset, c.data) for c in chunker.flush()] == [(7, "e")]
    assert chunker.flush() == [] and chunker.offset == 8


def test_chunker_keeps_an_incomplete_character_until_it_is_complete():
    chunker = LogChunker()
    assert chunker.feed("x€".encode()[:-1]) == []
    assert [c.data for c in chunker.flush()] == ["x"]  # the partial € stays behind
    assert [c.data for c in chunker.feed("€".encode()[-1:] + b"\n")] == ["€\n"]
    # invalid bytes at EOF are flushed anyway, replaced
    chunker.feed(b"\xe2\x82")
    assert [c.data for c in chunker.flush(final=True)] == ["\ufffd"]
    assert chunker.offset == len("x€\n".encode()) + 2


def test_a_long_line_without_newline_is_cut_at_max_carry_on_a_character_boundary():
    chunker = LogChunker()
    data = ("é" * MAX_CARRY).encode()  # 2 bytes each
    chunks = chunker.feed(data[: MAX_CARRY + 1])  # ends in the middle of an é
    assert len(chunks) == 1 and chunks[0].nbytes == MAX_CARRY and chunker.pending == 1
    assert chunks[0].data == "é" * (MAX_CARRY // 2)


def test_a_lot_of_output_arrives_complete_and_in_order():
    code = """
        import sys
        for i in range(200000):
            sys.stdout.write(f"line {i:06d} " + "x" * 20 + "\\n")
    """
    trial, out = _run(_spec(code))
    result = trial.wait()
    assert result.exit_code == 0
    lines = out.text.splitlines()
    assert len(lines) == 200000 and lines[-1].startswith("line 199999")
    assert all(c.data.endswith("\n") for c in out.chunks)


def test_phase_lines_are_reported():
    trial, out = _run(
        _spec("""
        print("@@campaign-phase waiting for ready", flush=True)
        print("not a @@campaign-phase line")
        print("@@campaign-phase benchmarking")
    """)
    )
    trial.wait()
    assert out.phases == ["waiting for ready", "benchmarking"]


def test_phase_scanner_handles_lines_split_across_chunks():
    scanner = PhaseScanner()
    assert scanner.feed("x\n@@campaign-") == []
    assert scanner.feed("phase tearing down\n@@campaign-phase  \n") == ["tearing down"]


# ---- GPUs ----------------------------------------------------------------------------------------


def test_without_a_gpu_the_release_check_says_so(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert gpu_memory_used() is None
    assert check_gpus_released(None) == (None, "no GPU on this node")


def _fake_nvidia_smi(tmp_path: Path, used: list[int]) -> Path:
    state = tmp_path / "used.json"
    state.write_text(json.dumps(used))
    script = tmp_path / "bin" / "nvidia-smi"
    script.parent.mkdir()
    script.write_text(
        textwrap.dedent(f"""\
        #!{PY}
        import json, sys
        used = json.load(open({str(state)!r}))
        if any(a.startswith("--query-compute-apps") for a in sys.argv):
            print("4242, python3, 30000")
        else:
            for i, mib in enumerate(used):
                print(f"{{i}}, {{mib}}")
    """)
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return state


def test_gpu_memory_not_freed_is_reported_with_gpus_and_pids(tmp_path, monkeypatch):
    state = _fake_nvidia_smi(tmp_path, [5, 30005])
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    assert gpu_memory_used() == {0: 5, 1: 30005}
    released, note = check_gpus_released({0: 5, 1: 5}, wait_s=0.3, poll_s=0.1)
    assert released is False
    assert "GPU 1: 30005 MiB used (before: 5 MiB)" in note and "GPU 0" not in note
    assert "pid 4242" in note
    state.write_text(json.dumps([5, 6]))
    assert check_gpus_released({0: 5, 1: 5}, wait_s=0.3, poll_s=0.1) == (True, "")
