"""The SLURM executor: a trial becomes a batch job.

Submit with `sbatch --parsable` (an argv list; the batch script is generated with every value
quoted by shlex), track with `squeue` (then `scontrol show job`, then `sacct` once it has left the
queue), stream the job's output file as it grows into the same chunks as a local trial (the
runner and the job share the output directory: on a real cluster, a shared filesystem), map job
states to trial outcomes, cancel with `scancel --signal=TERM --full` then `scancel` after the
grace period. The job id and output path are kept in `<spool>/slurm/<attempt>.json`, so a
restarted runner re-attaches to its jobs instead of losing them.

Multi-node trials (requirements `nodes` > 1): the batch script exports MASTER_ADDR (the first node
of the allocation) and MASTER_PORT, then `srun` starts `tasks_per_node` tasks per node (when set: several CPU ranks per node, say),
else one per GPU (`gpus_per_node`), else one, running `runners.executors.srun_task`, which maps
SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID / SLURM_NODEID to torch.distributed's env:// variables
and execs the recipe as a rank.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.protocol.recipes import RecipeError
from runners.fingerprint import slurm_partition
from runners.process import ATTEMPT_ENV, LogChunker, OutputChunk, PhaseScanner, TrialHooks, TrialResult, trial_env
from runners.recipes import LaunchSpec

log = logging.getLogger("campaign.runner.slurm")

# Job states (squeue %T / scontrol JobState / sacct State).
ACTIVE = {
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "SUSPENDED",
    "REQUEUED",
    "RESIZING",
    "SIGNALING",
    "STAGE_OUT",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "RESV_DEL_HOLD",
    "STOPPED",
}
WAITING = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
# sbatch options a requirement may not set: the executor owns them (tracking depends on them).
RESERVED_OPTIONS = (
    "--output",
    "--error",
    "--open-mode",
    "--wrap",
    "--parsable",
    "--wait",
    "--array",
    "--chdir",
    "--job-name",
    "-o",
    "-e",
    "-D",
    "-J",
    "-a",
    "-W",
)
COMMAND_TIMEOUT_S = 30.0
OUTPUT_POLL_S = 0.05  # how often the job's output file is checked for growth


class SlurmError(RuntimeError):
    """A SLURM command failed (the message carries its stderr)."""


@dataclass
class SlurmConfig:
    """The runner's SLURM settings (`campaign runner --executor slurm ...`)."""

    partition: str = ""
    account: str = ""
    time_limit: str = ""  # sbatch --time; empty: derived from the recipe's timeout
    gpus_per_node: int = 0
    sbatch_options: list[str] = field(default_factory=list)  # extra options for every job
    gpu_model: str = ""  # what the partition's GPUs are, for the fingerprint (the runner may not see them)
    sm: str = ""
    poll_s: float = 0.5  # squeue period while a job is queued or running


def _run(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        # sbatch exports its own environment into the job: give it a trial's, never the board's secrets.
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL, env=trial_env({})
        )
    except FileNotFoundError as exc:
        raise SlurmError(f"{argv[0]} not found: is SLURM installed on the runner's host?") from exc
    except subprocess.TimeoutExpired as exc:
        raise SlurmError(f"{argv[0]} did not answer within {COMMAND_TIMEOUT_S:g}s") from exc
    if check and done.returncode != 0:
        raise SlurmError(f"{' '.join(argv[:2])}: {(done.stderr or done.stdout).strip()[:500]}")
    return done


def check_options(options: Any, where: str) -> list[str]:
    """sbatch options from a requirement or the runner's config: a list of `--name[=value]` strings."""
    if options is None:
        return []
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise RecipeError(f"{where}: must be a list of sbatch options such as ['--qos=high']")
    for option in options:
        if not option.startswith("-") or "\n" in option or "\0" in option:
            raise RecipeError(f"{where}: {option!r} is not an sbatch option (expected --name or --name=value)")
        name = option.split("=", 1)[0]
        if name in RESERVED_OPTIONS:
            raise RecipeError(f"{where}: {name} is set by the runner (it follows the job's output and state)")
    return options


def job_shape(requirements: dict[str, Any] | None, config: SlurmConfig) -> tuple[int, int, list[str]]:
    """(nodes, gpus per node, extra sbatch options) for an approach's requirements."""
    req = requirements or {}
    try:
        nodes = int(req["nodes"]) if req.get("nodes") is not None else 1
        gpus = int(req.get("gpus_per_node") or req.get("gpus") or config.gpus_per_node or 0)
    except (TypeError, ValueError):
        raise RecipeError("requirements.nodes / gpus_per_node: must be whole numbers") from None
    if nodes < 1 or gpus < 0:
        raise RecipeError("requirements.nodes must be >= 1 and gpus_per_node >= 0")
    return nodes, gpus, check_options(req.get("sbatch"), "requirements.sbatch")


def tasks_per_node(requirements: dict[str, Any] | None, nodes: int, gpus: int) -> int:
    """Ranks (srun tasks) per node: requirements.tasks_per_node, else one per GPU, else one. A
    single-node trial is one task (the recipe's own launcher starts its ranks)."""
    if nodes == 1:
        return 1
    try:
        tasks = int((requirements or {}).get("tasks_per_node") or 0)
    except (TypeError, ValueError):
        raise RecipeError("requirements.tasks_per_node: must be a whole number") from None
    if tasks < 0:
        raise RecipeError("requirements.tasks_per_node must be >= 0")
    return tasks or max(1, gpus)


def time_limit(spec: LaunchSpec, config: SlurmConfig) -> str:
    if config.time_limit:
        return config.time_limit
    return str(max(1, math.ceil((spec.timeout_s + 120) / 60)))  # minutes; the runner's own deadline comes first


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def batch_script(spec: LaunchSpec, attempt_id: str, trial_id: int, nodes: int, tasks_per_node: int) -> str:
    """The job's script. Every value from the recipe is quoted with shlex; nothing is interpolated raw."""
    lines = [
        "#!/bin/bash",
        f"# campaign trial {int(trial_id)} attempt {shlex.quote(attempt_id)}: generated by the runner",
        f"export {ATTEMPT_ENV}={shlex.quote(attempt_id)}",
    ]
    for key, value in spec.env.items():
        if not _ENV_NAME.match(key):
            raise RecipeError(f"env: {key!r} is not a variable name")
        lines.append(f"export {key}={shlex.quote(str(value))}")
    if nodes == 1:
        lines.append(f"exec {shlex.join(spec.argv)}")
    else:
        # Rendezvous: torch.distributed env:// with the allocation's first node as the master.
        lines += [
            'first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            "addr=$(scontrol show node -o \"$first\" | tr ' ' '\\n' | sed -n 's/^NodeAddr=//p')",
            'export MASTER_ADDR="${addr:-$first}"',
            "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))",
        ]
        python = spec.argv[0] if len(spec.argv) > 2 and spec.argv[1] == "-m" else "python3"
        srun = [
            "srun",
            "--kill-on-bad-exit=1",
            f"--nodes={nodes}",
            f"--ntasks-per-node={tasks_per_node}",
            python,
            "-m",
            "runners.executors.srun_task",
            "--",
            *spec.argv,
        ]
        lines.append(f"exec {shlex.join(srun)}")
    return "\n".join(lines) + "\n"


def parse_exit_code(text: str | None) -> tuple[int | None, int | None]:
    """SLURM's 'code:signal' -> (exit code, signal or None)."""
    if not text or ":" not in text:
        return None, None
    code, _, sig = text.partition(":")
    try:
        return int(code), (int(sig) or None)
    except ValueError:
        return None, None


def job_info(job_id: str) -> dict[str, str] | None:
    """State, reason and exit code of a job SLURM still knows: squeue, then scontrol, then sacct."""
    done = _run(["squeue", "-h", "-j", job_id, "-o", "%T|%r"], check=False)
    line = done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else ""
    if line:
        state, _, reason = line.partition("|")
        if state in ACTIVE:
            return {"state": state, "reason": reason}
    done = _run(["scontrol", "show", "job", "-o", job_id], check=False)
    if done.returncode == 0 and "JobState=" in done.stdout:
        fields = dict(re.findall(r"(\w+)=(\S*)", done.stdout))
        return {
            "state": fields.get("JobState", ""),
            "reason": fields.get("Reason", ""),
            "exit_code": fields.get("ExitCode", ""),
        }
    done = _run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,ExitCode,Reason"], check=False)
    if done.returncode == 0 and done.stdout.strip():
        state, exit_code, reason = (done.stdout.strip().splitlines()[0].split("|") + ["", "", ""])[:3]
        return {"state": state.split()[0] if state else "", "reason": reason, "exit_code": exit_code}
    return None


class SlurmTrial:
    """One attempt as a SLURM job; the same shape as runners.process.TrialProcess."""

    popen = None
    leader = None

    def __init__(
        self,
        executor: SlurmExecutor,
        attempt_id: str,
        *,
        trial_id: int,
        grace_s: float,
        timeout_s: float,
        hooks: TrialHooks,
        sbatch_argv: list[str] | None = None,
        script: str = "",
        job_id: str = "",
        output: Path | None = None,
        resume_offset: int = 0,
    ) -> None:
        self.executor = executor
        self.attempt_id = attempt_id
        self.trial_id = trial_id
        self.grace_s = grace_s
        self.timeout_s = timeout_s
        self.hooks = hooks
        self.sbatch_argv = sbatch_argv or []
        self.script = script
        self.job_id = job_id
        self.output = output or executor.state_dir / f"{attempt_id}.out"
        self.state = "PENDING" if not job_id else ""
        self.reason = ""
        self.info: dict[str, str] | None = None
        self._cancel = threading.Event()
        self._kill_now = False
        self._ended = threading.Event()
        self._detached = threading.Event()
        self._follower: threading.Thread | None = None
        self.chunker = LogChunker()
        self.chunker.offset = resume_offset

    @property
    def pid(self) -> int | None:
        return int(self.job_id) if self.job_id.isdigit() else None

    # ---- submit / follow ----

    def start(self) -> None:
        """Submit the job. Raises OSError (with the reason) when sbatch refuses it."""
        script_path = self.executor.state_dir / f"{self.attempt_id}.sh"
        script_path.write_text(self.script)
        self.output.unlink(missing_ok=True)
        try:
            done = _run([*self.sbatch_argv, str(script_path)])
        except SlurmError as exc:
            raise OSError(str(exc)) from None
        self.job_id = done.stdout.strip().split(";")[0]
        self.executor.remember(self.attempt_id, self.trial_id, self.job_id, self.output, self.timeout_s)
        log.info("trial %s attempt %s: SLURM job %s", self.trial_id, self.attempt_id, self.job_id)
        self._follow()

    def _follow(self) -> None:
        self._follower = threading.Thread(target=self._read_output, name=f"slurm-output-{self.attempt_id}", daemon=True)
        self._follower.start()

    def _read_output(self) -> None:
        """Follow the job's output file from the chunker's offset; stops at EOF once the job ended."""
        scanner = PhaseScanner()

        def deliver(chunks: list[OutputChunk]) -> None:
            for chunk in chunks:
                self.hooks.on_chunk(chunk)
                # After the spool has it: a re-attaching runner resumes at the first byte not spooled.
                self.executor.remember_offset(self.attempt_id, chunk.offset + chunk.nbytes)
                for name in scanner.feed(chunk.data):
                    self.hooks.on_phase(name)

        handle = None
        last_data = time.monotonic()
        try:
            while not self._detached.is_set():
                if handle is None:
                    try:
                        handle = open(self.output, "rb")
                        handle.seek(self.chunker.offset)
                    except FileNotFoundError:
                        if self._ended.is_set():
                            return
                        time.sleep(OUTPUT_POLL_S)
                        continue
                data = handle.read(64 * 1024)
                if data:
                    last_data = time.monotonic()
                    deliver(self.chunker.feed(data))
                    continue
                if self._ended.is_set():
                    break  # the job is over and everything it wrote has been read
                if self.chunker.pending and time.monotonic() - last_data >= 0.1:
                    deliver(self.chunker.flush())
                time.sleep(OUTPUT_POLL_S)
        finally:
            if not self._detached.is_set():  # detached: the partial line is re-read after re-attaching
                deliver(self.chunker.flush(final=True))
            if handle is not None:
                handle.close()

    # ---- state ----

    def _poll(self) -> None:
        info = job_info(self.job_id)
        self.info = info
        if info is None:
            self.state, self.reason = "UNKNOWN", ""
            return
        before = (self.state, self.reason)
        self.state, self.reason = info["state"], info.get("reason", "")
        if self.state in WAITING and before != (self.state, self.reason):
            reason = self.reason if self.reason and self.reason != "None" else "waiting"
            self.hooks.on_phase(f"queued ({reason})"[:40])

    def wait_running(self) -> None:
        """Block while the job is queued (reporting the scheduler's reason as the phase)."""
        while not self._cancel.is_set():
            self._poll()
            if self.state not in WAITING:
                return
            self._cancel.wait(self.executor.config.poll_s)

    def detach(self) -> bool:
        """Stop following without touching the job (the runner is stopping; a restart re-attaches)."""
        self._detached.set()
        self._cancel.set()
        return True

    def cancel(self, *, kill_now: bool = False) -> None:
        self._kill_now = self._kill_now or kill_now
        self._cancel.set()

    def wait(self) -> TrialResult | None:
        """Block until the job has left the queue; then the output is read to its end.
        None: detached (the job goes on without this runner process)."""
        deadline: float | None = None
        signalled_at: float | None = None
        killed = timed_out = False
        try:
            while not self._detached.is_set():
                self._poll()
                if self.state not in ACTIVE:
                    break
                now = time.monotonic()
                if self.state not in WAITING and deadline is None:
                    deadline = now + self.timeout_s
                if deadline is not None and now > deadline and not self._cancel.is_set():
                    timed_out = True
                    self._cancel.set()
                # Detached while polling: leave the job alone (detach also sets _cancel to wake the wait).
                if self._cancel.is_set() and not killed and not self._detached.is_set():
                    if self.state in WAITING or self._kill_now:
                        _run(["scancel", self.job_id], check=False)
                        killed = True
                    elif signalled_at is None:
                        self.hooks.on_teardown()
                        _run(["scancel", "--signal=TERM", "--full", self.job_id], check=False)
                        signalled_at = now
                    elif now - signalled_at >= self.grace_s:
                        _run(["scancel", self.job_id], check=False)  # SLURM: SIGTERM, KillWait, SIGKILL
                        killed = True
                if self._cancel.is_set():
                    time.sleep(min(self.executor.config.poll_s, 0.2))
                else:
                    self._cancel.wait(self.executor.config.poll_s)
        finally:
            self._ended.set()
            if self._follower is not None:
                self._follower.join(timeout=30)
        if self._detached.is_set():
            return None
        return self._result(cancelled=self._cancel.is_set() and not timed_out, timed_out=timed_out)

    def _result(self, *, cancelled: bool, timed_out: bool) -> TrialResult:
        info = self.info or {}
        state = self.state
        code, sig = parse_exit_code(info.get("exit_code"))
        where = f"SLURM job {self.job_id}"
        if timed_out:
            return TrialResult("timed_out", code, sig, f"{where}: no result within {self.timeout_s:g}s; cancelled")
        if cancelled:  # asked for: whatever the job did on SIGTERM, the trial was cancelled
            return TrialResult("cancelled", code, sig)
        if state == "UNKNOWN":
            return TrialResult(
                "exited",
                None,
                None,
                f"{where}: SLURM no longer knows this job (purged from its records before the runner saw it end)",
            )
        if state == "COMPLETED":
            return TrialResult("exited", code if code is not None else 0, sig)
        if state == "CANCELLED" or state.startswith("CANCELLED"):
            return TrialResult("cancelled", code, sig, f"{where} was cancelled outside the runner (scancel)")
        if state == "TIMEOUT":
            return TrialResult("timed_out", code, sig, f"{where} reached its SLURM time limit")
        if state == "FAILED":
            return TrialResult("exited", code if code else 1, sig)
        return TrialResult(
            "exited",
            code,
            sig,
            f"{where} ended {state}"
            + (f" ({info.get('reason')})" if info.get("reason") not in (None, "", "None") else ""),
        )


class SlurmExecutor:
    """Runs trials as SLURM batch jobs (see the module docstring)."""

    name = "slurm"

    def __init__(self, config: SlurmConfig, spool_dir: Path) -> None:
        self.config = config
        self.state_dir = Path(spool_dir) / "slurm"
        self.state_dir.mkdir(parents=True, exist_ok=True)
        check_options(config.sbatch_options, "--sbatch-option")

    def sbatch_argv(
        self,
        spec: LaunchSpec,
        trial_id: int,
        attempt_id: str,
        nodes: int,
        tasks_per_node: int,
        gpus_per_node: int,
        extra: list[str],
    ) -> list[str]:
        argv = [
            "sbatch",
            "--parsable",
            f"--job-name=campaign-trial-{int(trial_id)}",
            f"--output={self.state_dir / f'{attempt_id}.out'}",
            f"--chdir={spec.cwd or self.state_dir}",
            f"--nodes={nodes}",
            f"--ntasks-per-node={tasks_per_node}",
            f"--time={time_limit(spec, self.config)}",
        ]
        if self.config.partition:
            argv.append(f"--partition={self.config.partition}")
        if self.config.account:
            argv.append(f"--account={self.config.account}")
        if gpus_per_node:
            argv.append(f"--gpus-per-node={gpus_per_node}")
        return argv + list(self.config.sbatch_options) + list(extra)

    def trial(
        self,
        spec: LaunchSpec,
        attempt_id: str,
        *,
        trial_id: int,
        requirements: dict[str, Any] | None,
        grace_s: float,
        on_chunk: Callable[[OutputChunk], None],
        on_phase: Callable[[str], None],
        on_teardown: Callable[[], None],
    ) -> SlurmTrial:
        """Raises RecipeError for requirements SLURM cannot be asked for."""
        nodes, gpus, extra = job_shape(requirements, self.config)
        tasks = tasks_per_node(requirements, nodes, gpus)
        return SlurmTrial(
            self,
            attempt_id,
            trial_id=trial_id,
            grace_s=grace_s,
            timeout_s=spec.timeout_s,
            hooks=TrialHooks(on_chunk, on_phase, on_teardown),
            sbatch_argv=self.sbatch_argv(spec, trial_id, attempt_id, nodes, tasks, gpus, extra),
            script=batch_script(spec, attempt_id, trial_id, nodes, tasks),
        )

    # ---- re-attach ----

    def _record(self, attempt_id: str) -> Path:
        return self.state_dir / f"{attempt_id}.json"

    def remember(self, attempt_id: str, trial_id: int, job_id: str, output: Path, timeout_s: float) -> None:
        tmp = self._record(attempt_id).with_suffix(".tmp")
        tmp.write_text(
            json.dumps({"trial_id": trial_id, "job_id": job_id, "output": str(output), "timeout_s": timeout_s})
        )
        os.replace(tmp, self._record(attempt_id))

    def remember_offset(self, attempt_id: str, offset: int) -> None:
        path = self.state_dir / f"{attempt_id}.offset"
        tmp = path.with_suffix(".offset-tmp")
        tmp.write_text(str(offset))
        os.replace(tmp, path)

    def reattach(
        self,
        attempt_id: str,
        *,
        resume_offset: int,
        grace_s: float,
        on_chunk: Callable[[OutputChunk], None],
        on_phase: Callable[[str], None],
        on_teardown: Callable[[], None],
    ) -> SlurmTrial | None:
        """The job a previous runner process submitted for this attempt, followed from resume_offset."""
        try:
            record = json.loads(self._record(attempt_id).read_text())
        except (OSError, ValueError):
            return None
        with contextlib.suppress(OSError, ValueError):
            resume_offset = max(resume_offset, int((self.state_dir / f"{attempt_id}.offset").read_text()))
        trial = SlurmTrial(
            self,
            attempt_id,
            trial_id=record["trial_id"],
            grace_s=grace_s,
            timeout_s=record.get("timeout_s", 600.0),
            hooks=TrialHooks(on_chunk, on_phase, on_teardown),
            job_id=record["job_id"],
            output=Path(record["output"]),
            resume_offset=resume_offset,
        )
        trial._follow()
        return trial

    def forget(self, attempt_id: str) -> None:
        for suffix in (".json", ".sh", ".out", ".offset"):
            (self.state_dir / f"{attempt_id}{suffix}").unlink(missing_ok=True)

    def describe(self) -> dict[str, Any]:
        return slurm_partition(self.config)

    def gpus_released(self, before: dict[int, int] | None) -> tuple[bool | None, str]:
        """The job's GPUs are on its nodes, not this runner's: SLURM releases them."""
        return None, "GPUs of a SLURM job are released by SLURM on its nodes"
