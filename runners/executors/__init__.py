"""Where a runner's trials run: as process groups on its own node (`local`, the default) or as
SLURM batch jobs (`slurm`).

An executor turns a LaunchSpec into a *trial handle* with the shape of `runners.process.TrialProcess`:
`start()` (raises OSError when it cannot start), `wait_running()` (blocks while the trial waits for
resources; returns at once for a local process), `cancel(kill_now=False)`, `wait() -> TrialResult` (None:
detached), `detach() -> bool` (leave the trial running for the next runner process; False: it cannot, so the
runner cancels it), `pid`, `leader`, `popen`. The agent drives every `Executor` the same way; only the SLURM
executor can re-attach to trials a previous runner process left running (`reattach`), and only a local trial's
GPUs are the runner's to check after it ends (`gpus_released`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from runners.process import OutputChunk, TrialProcess, TrialResult, check_gpus_released
from runners.recipes import LaunchSpec


class TrialHandle(Protocol):
    leader: Any
    popen: Any

    @property
    def pid(self) -> int | None: ...
    def start(self) -> None: ...
    def wait_running(self) -> None: ...
    def cancel(self, *, kill_now: bool = False) -> None: ...
    def wait(self) -> TrialResult | None: ...
    def detach(self) -> bool: ...


class Executor(Protocol):
    """What the agent (runners/agent.py) asks of where trials run."""

    @property
    def name(self) -> str: ...
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
    ) -> TrialHandle: ...
    def reattach(
        self,
        attempt_id: str,
        *,
        resume_offset: int,
        grace_s: float,
        on_chunk: Callable[[OutputChunk], None],
        on_phase: Callable[[str], None],
        on_teardown: Callable[[], None],
    ) -> TrialHandle | None: ...
    def forget(self, attempt_id: str) -> None: ...
    def describe(self) -> dict[str, Any]: ...
    def gpus_released(self, before: dict[int, int] | None) -> tuple[bool | None, str]:
        """(gpu_released, gpu_note) once a trial has ended: has its GPU memory come back? `before`: MiB used per
        GPU index before it started. None when this runner cannot tell (not its node's GPUs)."""
        ...


class LocalTrial(TrialProcess):
    """Today's process-group path: a local process has no queue to wait in."""

    def wait_running(self) -> None:
        return None

    def detach(self) -> bool:
        """A local process cannot outlive its runner's pipe: the runner cancels it."""
        return False


class LocalExecutor:
    name = "local"

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
    ) -> LocalTrial:
        return LocalTrial(
            spec, attempt_id, grace_s=grace_s, on_chunk=on_chunk, on_phase=on_phase, on_teardown=on_teardown
        )

    def reattach(self, attempt_id: str, **_: Any) -> None:
        """A local process cannot be re-attached: its output pipe died with the old runner."""
        return None

    def forget(self, attempt_id: str) -> None:
        return None

    def describe(self) -> dict[str, Any]:
        return {}

    def gpus_released(self, before: dict[int, int] | None) -> tuple[bool | None, str]:
        """The trial ran on this node: its GPU memory must come back (runners.process.check_gpus_released)."""
        return check_gpus_released(before)


def spooled_end(spool: Any) -> int:
    """Byte offset just past the last chunk still in an attempt's spool (0: none left)."""
    last = spool.chunks_after(spool.last_seq - 1, limit=1)
    return last[0].offset + len(last[0].data.encode()) if last else 0
