"""One trial as a process tree the runner owns: spawn, read output, time out, cancel, clean up.

The trial runs in its own session (`start_new_session=True`), so its process group id is its
pid and one `killpg` reaches it and every child that stayed in the group. Children that
daemonize (double fork + setsid, even exec'ing with an empty environment) leave the group; to
reach them
  * the runner is the child subreaper (PR_SET_CHILD_SUBREAPER): an orphaned descendant of a
    trial is re-parented to the runner, not to init, so it stays findable: a child of the runner
    in another session than the runner's is an adopted orphan of some trial. It belongs to the
    trial whose group or session it is in, else to the only trial running; with several trials
    running at once, an orphan that left every trial's session is killed when the last of them
    ends. The runner's own helpers (nvidia-smi probes) share its session and are never touched;
  * the runner polls the trial's descendants every `poll_s` and remembers (pid, create_time);
  * ATTEMPT_ENV=<attempt id> is set in the trial's environment and, before killing, the runner
    looks for processes of this user whose environment carries it.
Every kill re-checks pid + create_time, so a reused pid is never signalled, and nothing is
ever picked by name. Cancel and timeout: SIGTERM to all of it, `grace_s`, then SIGKILL.
When the trial exits on its own, whatever it left behind gets the same treatment.
(A cgroup per trial would contain trials without the subreaper's bookkeeping; see docs/security.md.)

Output: stdout and stderr merged into one pipe, read in binary as soon as data arrives
(`os.read` up to 64 KiB) and cut into chunks by `LogChunker` (see there). Reading happens on
its own thread and never waits for the network: the chunk callback writes to the spool.
"""

from __future__ import annotations

import ctypes
import os
import select
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import psutil

from app.protocol.metrics import PHASE_PREFIX  # a recipe line naming the trial's phase
from app.protocol.trace import Trace
from runners.fingerprint import query_compute_apps, query_gpus
from runners.recipes import LaunchSpec

ATTEMPT_ENV = "CAMPAIGN_ATTEMPT_ID"
"""Set in every trial's environment: marks the processes of one attempt, even daemonized ones."""

# ---- the trial's environment -------------------------------------------------------------------

TRIAL_VISIBLE_CAMPAIGN_ENV = {"CAMPAIGN_LOG_TRACE"}
"""The only CAMPAIGN_* variables of the runner a trial sees: every other one is the board's
configuration (secret key, database URL, runner token, ...), none of the trial's business."""
SECRET_ENV = {"PGPASSWORD", "PGPASSFILE", "DATABASE_URL"}
"""Other variables the board's processes may hold secrets in (libpq, generic database URLs)."""
_withheld: set[str] = set()


def withhold(secret: str) -> None:
    """A secret value this process holds (the runner token): no variable carrying it reaches a trial."""
    if secret:
        _withheld.add(secret)


def is_board_secret(name: str, value: str) -> bool:
    if name.startswith("CAMPAIGN_") and name not in TRIAL_VISIBLE_CAMPAIGN_ENV:
        return True
    return name in SECRET_ENV or any(secret in value for secret in _withheld)


def without_board_secrets(env: dict[str, str]) -> dict[str, str]:
    """The environment minus every secret of the board (see `is_board_secret`)."""
    return {name: value for name, value in env.items() if not is_board_secret(name, value)}


def trial_env(declared: dict[str, str]) -> dict[str, str]:
    """What a trial runs with: the node's ordinary environment minus the board's secrets, plus
    what the approach declares (its recipe's env)."""
    return {**without_board_secrets(dict(os.environ)), **declared}


READ_SIZE = 64 * 1024
MAX_CARRY = 64 * 1024  # a partial line longer than this is sent without waiting for its newline


# ---- output chunks --------------------------------------------------------------------------


@dataclass(frozen=True)
class OutputChunk:
    offset: int  # byte offset of the chunk's first byte in the attempt's output
    data: str  # the chunk's bytes decoded as UTF-8 (errors replaced)
    nbytes: int  # how many output bytes the chunk covers
    read_ns: int = field(default=0, compare=False)  # when its last bytes were read (time.time_ns(); tracing)


@dataclass(frozen=True)
class TrialHooks:
    """What a running trial tells its runner: each output chunk, each phase line, the start of its teardown."""

    on_chunk: Callable[[OutputChunk], None]
    on_phase: Callable[[str], None]
    on_teardown: Callable[[], None]


trace = Trace("runner")


def _incomplete_utf8_tail(buf: bytes) -> int:
    """How many bytes at the end of buf start a UTF-8 sequence that is not complete yet (0-3)."""
    for back in range(1, min(4, len(buf)) + 1):
        byte = buf[-back]
        if byte & 0xC0 != 0x80:  # not a continuation byte: the start of the last sequence
            need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte & 0xF8 == 0xF0 else 1
            return back if need > back else 0
    return 0


class LogChunker:
    """Turn raw output reads into chunks that end at a line end where there is one.

    `feed(bytes)` returns the chunk up to the last newline of what has arrived and keeps the
    partial line; `flush()` (no data for a while, or EOF with `final=True`) returns the partial
    line too. A multi-byte UTF-8 character split across reads stays in the carry until it is
    complete, so every chunk's `data` decodes cleanly and the chunks' bytes, joined, are
    exactly the output. Offsets count bytes.
    """

    def __init__(self) -> None:
        self.offset = 0
        self._carry = b""
        self.read_ns = 0  # set by the reader when tracing

    @property
    def pending(self) -> int:
        return len(self._carry)

    def feed(self, data: bytes) -> list[OutputChunk]:
        buf = self._carry + data
        cut = buf.rfind(b"\n") + 1
        if cut == 0 and len(buf) >= MAX_CARRY:
            cut = len(buf) - _incomplete_utf8_tail(buf)
        self._carry = buf[cut:]
        return self._emit(buf[:cut])

    def flush(self, final: bool = False) -> list[OutputChunk]:
        buf = self._carry
        cut = len(buf) if final else len(buf) - _incomplete_utf8_tail(buf)
        self._carry = buf[cut:]
        return self._emit(buf[:cut])

    def _emit(self, raw: bytes) -> list[OutputChunk]:
        if not raw:
            return []
        chunk = OutputChunk(self.offset, raw.decode("utf-8", errors="replace"), len(raw), self.read_ns)
        self.offset += len(raw)
        return [chunk]


class PhaseScanner:
    """Find `@@campaign-phase <name>` lines in chunk text (lines may span chunks)."""

    def __init__(self) -> None:
        self._partial = ""

    def feed(self, text: str) -> list[str]:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()[:200]  # only the start of a line can matter
        return [
            line[len(PHASE_PREFIX) :].strip()[:40]
            for line in lines
            if line.startswith(PHASE_PREFIX) and line[len(PHASE_PREFIX) :].strip()
        ]


# ---- the runner's line ------------------------------------------------------------------------

STARTED_PREFIX = "[runner] "
MAX_SHOWN_ARG = 120  # characters of one argument the line shows whole
MAX_SHOWN_COMMAND = 1000


def _shown_arg(arg: str) -> str:
    """An argument as the runner's line shows it: quoted as a shell would, a script (`-c` code) or
    another long or multi-line one by its first line and its size."""
    lines = arg.splitlines()
    if len(arg) <= MAX_SHOWN_ARG and len(lines) <= 1:
        return shlex.quote(arg)
    head = next((line.strip() for line in lines if line.strip()), "")[:60]
    size = f"{len(lines)} lines" if len(lines) > 1 else f"{len(arg)} characters"
    return f"{shlex.quote(head + ' ...')} ({size})"


def started_line(spec: LaunchSpec, pid: int) -> str:
    """The line the runner writes first into a trial's output: what it started (for a recipe, argv[0]
    is the recipes' interpreter), its pid and where. One line: control characters show escaped."""
    command = " ".join(_shown_arg(arg) for arg in spec.argv)
    command = "".join(c if c.isprintable() else repr(c)[1:-1] for c in command)
    if len(command) > MAX_SHOWN_COMMAND:
        command = command[:MAX_SHOWN_COMMAND] + f" ... ({len(command) - MAX_SHOWN_COMMAND} more characters)"
    where = f" in {spec.cwd}" if spec.cwd else ""
    return f"{STARTED_PREFIX}started pid {pid}{where}: {command}\n"


# ---- process bookkeeping ----------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessId:
    """A process identity that survives pid reuse: pid plus its start time."""

    pid: int
    create_time: float

    @classmethod
    def of(cls, proc: psutil.Process) -> ProcessId:
        return cls(proc.pid, proc.create_time())

    def process(self) -> psutil.Process | None:
        """The live process if it is still the one we saw (not a reused pid), else None."""
        try:
            proc = psutil.Process(self.pid)
            if abs(proc.create_time() - self.create_time) > 0.01:
                return None
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            return proc
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            return None


def processes_with_marker(attempt_id: str) -> list[ProcessId]:
    """Processes of this user whose environment has ATTEMPT_ENV=attempt_id."""
    uid = os.getuid()
    found: list[ProcessId] = []
    me = os.getpid()
    for proc in psutil.process_iter(["uids"]):
        try:
            if proc.pid == me or proc.info["uids"] is None or proc.info["uids"].real != uid:
                continue
            if proc.environ().get(ATTEMPT_ENV) == attempt_id:
                found.append(ProcessId.of(proc))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def kill_processes(targets: Iterable[ProcessId], sig: int) -> int:
    """Send sig to each target still alive as the same process; returns how many were signalled."""
    count = 0
    for target in targets:
        proc = target.process()
        if proc is None:
            continue
        try:
            proc.send_signal(sig)
            count += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            pass
    return count


# ---- orphans adopted by the runner (child subreaper) -------------------------------------------

PR_SET_CHILD_SUBREAPER = 36
_live_leaders: dict[int, TrialProcess] = {}  # leader pid -> its running trial
_adopted: set[int] = set()  # orphans attributed to a trial: ours to reap once they die
_busy_since = [0.0]  # start time of the first trial since no trial was running
_before_busy: set[ProcessId] = set()  # our other-session children then: not any trial's (same-tick starts)
_leaders_lock = threading.Lock()


def become_subreaper() -> bool:
    """Make this process the child subreaper of everything it starts (Linux); idempotent."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def adopted_orphans() -> list[psutil.Process]:
    """Children of this process that trials left behind: in another session than ours (our own
    helpers share our session) and not the leader of a running trial."""
    me = psutil.Process()
    try:
        my_sid = os.getsid(0)
        children = me.children()
    except (psutil.Error, OSError):
        return []
    with _leaders_lock:
        leaders = set(_live_leaders)
    orphans = []
    for child in children:
        try:
            if child.pid not in leaders and os.getsid(child.pid) != my_sid:
                orphans.append(child)
        except (OSError, psutil.Error):
            continue
    return orphans


def _identities(procs: list[psutil.Process]) -> set[ProcessId]:
    found = set()
    for proc in procs:
        try:
            found.add(ProcessId.of(proc))
        except psutil.Error:
            continue
    return found


def orphans_of(trial: TrialProcess) -> set[ProcessId]:
    """The adopted orphans that belong to `trial` (see the module docstring)."""
    with _leaders_lock:
        others = [t for t in _live_leaders.values() if t is not trial]
    found: set[ProcessId] = set()
    for proc in adopted_orphans():
        try:
            ids = {os.getpgid(proc.pid), os.getsid(proc.pid)}
            owner = next((t for t in [trial, *others] if t.popen is not None and t.popen.pid in ids), None)
            # Unowned: started while trials ran (older ones are not any trial's), only trial running.
            if owner is trial or (
                owner is None
                and not others
                and proc.create_time() >= _busy_since[0]
                and ProcessId.of(proc) not in _before_busy
            ):
                found.add(ProcessId.of(proc))
                found.update(ProcessId.of(c) for c in proc.children(recursive=True))
        except (OSError, psutil.Error):
            continue
    with _leaders_lock:
        _adopted.update(t.pid for t in found)
    return found


def reap_orphans() -> None:
    """Collect the exit status of adopted orphans that died (else they stay zombies)."""
    with _leaders_lock:
        pids = list(_adopted)
    for pid in pids:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not (or no longer) our child
            done = pid
        if done:
            with _leaders_lock:
                _adopted.discard(pid)


# ---- a trial ---------------------------------------------------------------------------------


@dataclass
class TrialResult:
    outcome: str  # exited, timed_out, cancelled, failed_to_start
    exit_code: int | None = None
    signal: int | None = None
    error: str = ""
    leftovers: list[int] = field(default_factory=list)  # pids still alive after the trial ended, then killed


class TrialProcess:
    """Runs one LaunchSpec to completion. `start()` then `wait()` (blocking; run it on a thread).

    on_chunk(OutputChunk) and on_phase(name) are called from the output reader thread.
    `cancel()` may be called from any thread.
    """

    def __init__(
        self,
        spec: LaunchSpec,
        attempt_id: str,
        *,
        grace_s: float = 10.0,
        on_chunk: Callable[[OutputChunk], None] = lambda chunk: None,
        on_phase: Callable[[str], None] = lambda name: None,
        on_teardown: Callable[[], None] = lambda: None,
        poll_s: float = 0.2,
        flush_after_s: float = 0.1,
    ) -> None:
        self.spec = spec
        self.attempt_id = attempt_id
        self.grace_s = grace_s
        self.on_chunk = on_chunk
        self.on_phase = on_phase
        self.on_teardown = on_teardown
        self.poll_s = poll_s
        self.flush_after_s = flush_after_s
        self.popen: subprocess.Popen[bytes] | None = None
        self.leader: ProcessId | None = None
        self.tracked: set[ProcessId] = set()
        self._cancel = threading.Event()
        self._kill_now = False
        self._stop_reading = threading.Event()
        self._reader: threading.Thread | None = None
        self.chunker = LogChunker()

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def start(self) -> None:
        """Spawn the trial. Raises OSError when it cannot start (no such program, bad cwd, ...)."""
        env = trial_env({**self.spec.env, ATTEMPT_ENV: self.attempt_id})
        become_subreaper()
        before = _identities(adopted_orphans()) if not _live_leaders else None
        with _leaders_lock:
            self.popen = subprocess.Popen(
                self.spec.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=self.spec.cwd or None,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
            try:
                self.leader = ProcessId.of(psutil.Process(self.popen.pid))
            except psutil.Error:
                self.leader = None
            if not _live_leaders:  # the same clock as the orphans' create_time
                _busy_since[0] = self.leader.create_time if self.leader else time.time()
                _before_busy.clear()
                _before_busy.update(before or ())
            _live_leaders[self.popen.pid] = self
        # The trial's first line is the runner's own, at once: a recipe may print nothing for seconds
        # (torch imports); the reader is not started yet, so this chunk is the output's first bytes.
        for chunk in self.chunker.feed(started_line(self.spec, self.popen.pid).encode()):
            self.on_chunk(chunk)
        self._reader = threading.Thread(target=self._read_output, name=f"output-{self.attempt_id}", daemon=True)
        self._reader.start()

    def cancel(self, *, kill_now: bool = False) -> None:
        """Stop the trial: SIGTERM, grace, SIGKILL (kill_now: SIGKILL at once)."""
        self._kill_now = self._kill_now or kill_now
        self._cancel.set()

    def wait(self) -> TrialResult:
        """Block until the trial has ended and everything it started is gone."""
        assert self.popen is not None and self._reader is not None, "start() first"
        reader = self._reader
        deadline = time.monotonic() + self.spec.timeout_s
        outcome = "exited"
        while self.popen.poll() is None:
            self._track_descendants()
            if self._cancel.wait(min(self.poll_s, max(0.0, deadline - time.monotonic()))):
                outcome = "cancelled"
                break
            if time.monotonic() >= deadline:
                outcome = "timed_out"
                break
        self.on_teardown()
        error = ""
        if outcome == "exited":
            # Let the pipe drain before looking for leftovers that still hold it open.
            reader.join(timeout=0.5)
        leftovers = self._terminate(kill_now=self._kill_now)
        if outcome == "timed_out":
            error = f"timed out after {self.spec.timeout_s:g} s"
        elif outcome == "exited" and leftovers:
            error = f"left {len(leftovers)} process(es) running after it exited (pids {', '.join(map(str, leftovers))}); killed them"
        reader.join(timeout=2.0)
        if reader.is_alive():  # something we could not see still holds the pipe
            self._stop_reading.set()
            reader.join(timeout=2.0)
        with _leaders_lock:
            _live_leaders.pop(self.popen.pid, None)
            last = not _live_leaders
        strays = orphans_of(self) if last else set()
        if strays:  # orphans that left every trial's session: the last trial to end takes them
            self._kill_all(strays)
        reap_orphans()
        code = self.popen.returncode
        return TrialResult(
            outcome=outcome,
            exit_code=code if code is not None and code >= 0 else None,
            signal=-code if code is not None and code < 0 else None,
            error=error,
            leftovers=leftovers,
        )

    # -- internals --

    @property
    def _popen(self) -> subprocess.Popen[bytes]:
        """The trial's process: the internals run only once start() has made it."""
        if self.popen is None:
            raise RuntimeError("start() first")
        return self.popen

    def _track_descendants(self) -> None:
        reap_orphans()
        try:
            children = psutil.Process(self._popen.pid).children(recursive=True)
        except psutil.Error:
            children = []
        children += [proc for proc in (t.process() for t in orphans_of(self)) if proc is not None]
        for child in children:
            try:
                self.tracked.add(ProcessId.of(child))
            except psutil.Error:
                continue

    def _targets(self) -> set[ProcessId]:
        if self._popen.returncode is None:
            self._track_descendants()
        targets = set(self.tracked)
        targets.update(processes_with_marker(self.attempt_id))
        targets.update(orphans_of(self))
        return {t for t in targets if t.process() is not None}

    def _signal_group(self, sig: int, targets: set[ProcessId]) -> None:
        pgid = self._popen.pid
        # While the leader is unreaped its pid cannot be reused, so the group is ours. After that,
        # signal the group only while a process we know of still belongs to it.
        ours = self._popen.returncode is None or any(_pgid(t.pid) == pgid for t in targets)
        if ours:
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _terminate(self, *, kill_now: bool) -> list[int]:
        """SIGTERM the group and everything tracked, wait grace_s, SIGKILL what is left.

        Returns the pids (other than the leader) that were still alive when this began."""
        targets = self._targets()
        leftovers = sorted(t.pid for t in targets if t.pid != self._popen.pid)
        if kill_now or self.grace_s <= 0:
            self._kill_all(targets)
        else:
            self._signal_group(signal.SIGTERM, targets)
            kill_processes(targets, signal.SIGTERM)
            deadline = time.monotonic() + self.grace_s
            while time.monotonic() < deadline:
                self._popen.poll()
                if self._popen.returncode is not None and not any(t.process() for t in targets):
                    # Anything started during the grace period? Look once more before stopping.
                    targets = self._targets()
                    if not targets:
                        break
                    self._signal_group(signal.SIGTERM, targets)
                    kill_processes(targets, signal.SIGTERM)
                time.sleep(0.05)
            else:
                self._kill_all(self._targets() | targets)
        try:
            self._popen.wait(timeout=5)
        except subprocess.TimeoutExpired:  # unkillable (D state); report rather than hang
            pass
        # Wait briefly for the killed ones to vanish so GPU checks see their memory freed.
        psutil.wait_procs([p for p in (t.process() for t in targets) if p], timeout=2)
        return leftovers

    def _kill_all(self, targets: set[ProcessId]) -> None:
        self._signal_group(signal.SIGKILL, targets)
        kill_processes(targets, signal.SIGKILL)
        # A process forked between our scan and the SIGKILL: one more pass.
        kill_processes(self._targets(), signal.SIGKILL)

    def _read_output(self) -> None:
        stdout = self._popen.stdout
        assert stdout is not None  # started with stdout=PIPE
        fd = stdout.fileno()
        scanner = PhaseScanner()
        last_data = time.monotonic()

        def deliver(chunks: list[OutputChunk]) -> None:
            for chunk in chunks:
                self.on_chunk(chunk)
                for name in scanner.feed(chunk.data):
                    self.on_phase(name)

        try:
            while not self._stop_reading.is_set():
                ready, _, _ = select.select([fd], [], [], self.flush_after_s)
                if not ready:
                    if self.chunker.pending and time.monotonic() - last_data >= self.flush_after_s:
                        deliver(self.chunker.flush())
                    continue
                data = os.read(fd, READ_SIZE)
                if not data:
                    break
                last_data = time.monotonic()
                if trace.on:
                    self.chunker.read_ns = time.time_ns()
                deliver(self.chunker.feed(data))
        except OSError:
            pass
        finally:
            deliver(self.chunker.flush(final=True))
            try:
                stdout.close()
            except OSError:
                pass


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def stop_attempt_leftovers(attempt_id: str, leader: ProcessId | None, grace_s: float) -> list[int]:
    """Kill what an attempt of a previous runner process left running (found by the leader's
    recorded identity and by the attempt's environment marker). Returns the pids it signalled."""
    targets = set(processes_with_marker(attempt_id))
    if leader is not None and leader.process() is not None:
        targets.add(leader)
    targets = {t for t in targets if t.process() is not None}
    if not targets:
        return []
    kill_processes(targets, signal.SIGTERM)
    psutil.wait_procs([p for p in (t.process() for t in targets) if p], timeout=grace_s)
    kill_processes(targets, signal.SIGKILL)  # re-checks identity: only the ones still alive
    return sorted(t.pid for t in targets)


# ---- GPUs after a trial -----------------------------------------------------------------------

GPU_SLACK_MIB = 256  # memory other tenants or the driver may take meanwhile


def gpu_memory_used() -> dict[int, int] | None:
    """MiB used per GPU index now; None when this node has no GPU."""
    gpus = query_gpus()
    return None if gpus is None else {gpu["index"]: gpu["memory_used_mib"] for gpu in gpus}


def check_gpus_released(
    before: dict[int, int] | None, *, wait_s: float = 5.0, poll_s: float = 0.5
) -> tuple[bool | None, str]:
    """(gpu_released, gpu_note): is GPU memory back to what it was before the trial?

    Waits up to wait_s for the driver to free memory of processes that just ended."""
    if before is None:
        return None, "no GPU on this node"
    deadline = time.monotonic() + wait_s
    while True:
        now = gpu_memory_used()
        if now is None:
            return None, "GPU memory could not be read after the trial"
        held = {index: used for index, used in now.items() if used > before.get(index, 0) + GPU_SLACK_MIB}
        if not held:
            return True, ""
        if time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
    parts = [
        f"GPU {index}: {used} MiB used (before: {before.get(index, 0)} MiB)" for index, used in sorted(held.items())
    ]
    apps = query_compute_apps()
    if apps:
        parts.append(
            "compute apps: " + ", ".join(f"pid {app['pid']} {app['name']} {app['used_mib']} MiB" for app in apps)
        )
    return False, ("; ".join(parts))[:500]
