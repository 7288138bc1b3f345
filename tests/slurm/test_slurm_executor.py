"""The SLURM executor against the real daemons: submit, follow the output live, states, cancel,
failure, re-attach, and a multi-node gloo allreduce across the two slurmd nodes."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from app.protocol.recipes import RecipeError
from runners.executors.slurm import SlurmConfig, SlurmExecutor, job_info
from runners.process import OutputChunk
from runners.recipes import build_launch
from tests.support.trials import python_recipe

pytestmark = pytest.mark.usefixtures("slurm_cluster")


def known_job(job_id: str) -> dict[str, str]:
    """job_info of a job SLURM must still know."""
    info = job_info(job_id)
    assert info is not None, f"SLURM does not know job {job_id}"
    return info


class Collector:
    def __init__(self) -> None:
        self.chunks: list[OutputChunk] = []
        self.phases: list[str] = []
        self.teardown = threading.Event()
        self.got_chunk = threading.Event()

    def callbacks(self) -> dict:
        return dict(on_chunk=self.on_chunk, on_phase=self.phases.append, on_teardown=self.teardown.set)

    def on_chunk(self, chunk) -> None:
        self.chunks.append(chunk)
        self.got_chunk.set()

    @property
    def text(self) -> str:
        return "".join(c.data for c in self.chunks)

    def contiguous(self, start: int = 0) -> bool:
        offset = start
        for chunk in self.chunks:
            if chunk.offset != offset:
                return False
            offset += chunk.nbytes
        return True


def _trial(
    executor: SlurmExecutor,
    recipe: dict,
    collector: Collector,
    requirements: dict | None = None,
    attempt: str = "a1",
    grace_s: float = 3.0,
):
    spec = build_launch(recipe)
    return executor.trial(
        spec, attempt, trial_id=1, requirements=requirements, grace_s=grace_s, **collector.callbacks()
    )


@pytest.fixture
def executor(tmp_path):
    yield SlurmExecutor(SlurmConfig(poll_s=0.2), tmp_path / "spool")
    # Jobs a failed test left behind are this test's own (their ids are in the spool): stop them.
    for record in (tmp_path / "spool" / "slurm").glob("*.json"):
        subprocess.run(["scancel", json.loads(record.read_text())["job_id"]], check=False)


def _wait(predicate, timeout: float = 60, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_output_streams_live_while_the_job_runs(executor, tmp_path):
    gate = tmp_path / "gate"
    collector = Collector()
    trial = _trial(
        executor,
        python_recipe(f"""
        import os, time
        print("first line", flush=True)
        while not os.path.exists({str(gate)!r}): time.sleep(0.05)
        for i in range(500): print(f"line {{i}} é", flush=True)
        """),
        collector,
    )
    trial.start()
    trial.wait_running()
    # The first line arrives while the job is still running (it waits for the gate).
    assert collector.got_chunk.wait(60), "no output while the job ran"
    assert known_job(trial.job_id)["state"] == "RUNNING"
    assert collector.text == "first line\n"
    gate.touch()
    result = trial.wait()
    assert (result.outcome, result.exit_code) == ("exited", 0)
    assert collector.text == "first line\n" + "".join(f"line {i} é\n" for i in range(500))
    assert collector.contiguous()


def test_a_failing_job_reports_its_exit_code(executor):
    collector = Collector()
    trial = _trial(executor, python_recipe("import sys; print('boom', flush=True); sys.exit(3)"), collector)
    trial.start()
    result = trial.wait()
    assert (result.outcome, result.exit_code) == ("exited", 3)
    assert collector.text == "boom\n"
    assert known_job(trial.job_id)["state"] == "FAILED"


def test_cancel_running_signals_first_then_kills(executor):
    collector = Collector()
    trial = _trial(
        executor,
        python_recipe("""
        import signal, sys, time
        def bye(signum, frame):
            print(f"got signal {signum}, cleaning up", flush=True); sys.exit(0)
        signal.signal(signal.SIGTERM, bye)
        print("ready", flush=True)
        while True: time.sleep(0.1)
        """),
        collector,
    )
    trial.start()
    trial.wait_running()
    assert collector.got_chunk.wait(60)
    trial.cancel()
    result = trial.wait()
    assert result.outcome == "cancelled" and result.error == ""
    assert collector.teardown.is_set()
    assert "got signal 15, cleaning up" in collector.text  # SIGTERM reached the program before any kill
    assert known_job(trial.job_id)["state"] in ("CANCELLED", "COMPLETED")


def test_cancel_running_kills_after_grace_when_term_is_ignored(executor):
    collector = Collector()
    trial = _trial(
        executor,
        python_recipe("""
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ignoring TERM", flush=True)
        while True: time.sleep(0.1)
        """),
        collector,
        grace_s=1.0,
    )
    trial.start()
    trial.wait_running()
    assert collector.got_chunk.wait(60)
    trial.cancel()
    result = trial.wait()
    assert result.outcome == "cancelled"
    assert known_job(trial.job_id)["state"] == "CANCELLED"


def test_pending_job_shows_the_scheduler_reason_and_cancels(executor):
    collector = Collector()
    trial = _trial(executor, python_recipe("print('never')"), collector, requirements={"sbatch": ["--begin=now+1hour"]})
    trial.start()
    waiter = threading.Thread(target=trial.wait_running)
    waiter.start()
    _wait(lambda: collector.phases, what="a queued phase")
    assert collector.phases[0] == "queued (BeginTime)"
    assert known_job(trial.job_id)["state"] == "PENDING"
    trial.cancel()
    waiter.join(30)
    result = trial.wait()
    assert result.outcome == "cancelled"
    assert collector.text == ""
    assert known_job(trial.job_id)["state"] == "CANCELLED"


def test_job_cancelled_outside_the_runner_is_reported_so(executor):
    collector = Collector()
    trial = _trial(executor, python_recipe("import time; print('up', flush=True); time.sleep(600)"), collector)
    trial.start()
    trial.wait_running()
    assert collector.got_chunk.wait(60)
    subprocess.run(["scancel", trial.job_id], check=True)
    result = trial.wait()
    assert result.outcome == "cancelled"
    assert "cancelled outside the runner" in result.error


def test_reattach_resumes_the_output_where_the_spool_stopped(executor, tmp_path):
    gate = tmp_path / "gate"
    collector = Collector()
    trial = _trial(
        executor,
        python_recipe(f"""
        import os, time
        for i in range(50): print(f"before {{i}}", flush=True)
        while not os.path.exists({str(gate)!r}): time.sleep(0.05)
        for i in range(50): print(f"after {{i}}", flush=True)
        """),
        collector,
        attempt="reattach",
    )
    trial.start()
    trial.wait_running()
    _wait(lambda: collector.text.endswith("before 49\n"), what="the first half")
    trial.detach()  # the runner process stops; the job goes on
    assert trial.wait() is None
    assert known_job(trial.job_id)["state"] == "RUNNING"
    gate.touch()
    # A new runner process: a new executor over the same spool directory.
    again = SlurmExecutor(SlurmConfig(poll_s=0.2), tmp_path / "spool")
    second = Collector()
    handle = again.reattach("reattach", resume_offset=0, grace_s=3.0, **second.callbacks())
    assert handle is not None and handle.job_id == trial.job_id
    result = handle.wait()
    assert result is not None
    assert (result.outcome, result.exit_code) == ("exited", 0)
    end = sum(c.nbytes for c in collector.chunks)
    assert second.chunks[0].offset == end and second.contiguous(end)
    assert collector.text + second.text == "".join(f"before {i}\n" for i in range(50)) + "".join(
        f"after {i}\n" for i in range(50)
    )
    assert again.reattach("nothing-here", resume_offset=0, grace_s=1.0, **second.callbacks()) is None


def _metrics_of(text: str) -> list[dict]:
    return [json.loads(line.split(" ", 1)[1]) for line in text.splitlines() if line.startswith("@@campaign-metric ")]


def test_multi_node_gloo_allreduce_across_two_slurmd_nodes(executor):
    """One rank per node: the world allreduce is the leaders' one, so it is the only scope measured."""
    collector = Collector()
    recipe = {
        "kind": "allreduce",
        "params": {"backend": "gloo", "tokens": [1, 4], "hidden_size": 256, "dtype": "fp32", "iters": 5, "warmup": 1},
        "timeout_s": 240,
    }
    trial = _trial(executor, recipe, collector, requirements={"nodes": 2})
    trial.start()
    result = trial.wait()
    assert (result.outcome, result.exit_code) == ("exited", 0), collector.text[-3000:]
    fields = subprocess.run(["scontrol", "show", "job", "-o", trial.job_id], capture_output=True, text=True).stdout
    assert "NumNodes=2" in fields and "NodeList=n[1-2]" in fields
    latency = [m for m in _metrics_of(collector.text) if m["name"] == "allreduce_latency_us"]
    assert sorted(m["tags"]["tokens"] for m in latency) == [1, 4], collector.text[-3000:]
    for m in latency:
        assert m["value"] > 0
        tags = m["tags"]
        assert (tags["world_size"], tags["scope"], tags["nodes"], tags["ranks_per_node"], tags["ranks"]) == (
            2,
            "world",
            2,
            1,
            2,
        )
    # Both slurmd "nodes" launched a task of the job's srun step (one rank each).
    state_dir = Path(os.environ["SLURM_CONF"]).parent
    for node in ("n1", "n2"):
        assert f"launch task StepId={trial.job_id}.0 " in (state_dir / f"slurmd-{node}.log").read_text()


def test_two_ranks_per_node_report_per_node_and_cross_node_figures(executor):
    """2 slurmd nodes x 2 ranks (tasks_per_node): each node's allreduce, the world's and the leaders'."""
    collector = Collector()
    recipe = {
        "kind": "allreduce",
        "params": {
            "backend": "gloo",
            "tokens": [1, 4],
            "hidden_size": 256,
            "dtype": "fp32",
            "iters": 4,
            "warmup": 1,
            "calls": 10,
            "per_call_iters": 0,
        },
        "timeout_s": 240,
    }
    trial = _trial(executor, recipe, collector, requirements={"nodes": 2, "tasks_per_node": 2})
    trial.start()
    result = trial.wait()
    assert (result.outcome, result.exit_code) == ("exited", 0), collector.text[-3000:]
    fields = subprocess.run(["scontrol", "show", "job", "-o", trial.job_id], capture_output=True, text=True).stdout
    assert "NumNodes=2" in fields and "NumTasks=4" in fields
    assert "2 nodes x 2 ranks (nodes from the launcher: n1: ranks [0, 1], n2: ranks [2, 3])" in collector.text
    found = _metrics_of(collector.text)
    for tokens in (1, 4):
        latency = [m for m in found if m["name"] == "allreduce_latency_us" and m["tags"]["tokens"] == tokens]
        by_scope = sorted((m["tags"]["scope"], m["tags"].get("node"), m["tags"].get("node_name")) for m in latency)
        assert by_scope == [("cross-node", None, None), ("node", 0, "n1"), ("node", 1, "n2"), ("world", None, None)]
        for m in latency:
            tags = m["tags"]
            assert m["value"] > 0 and tags["method"] == "nccl-tests" and tags["world_size"] == 4
            assert (tags["nodes"], tags["ranks_per_node"]) == (2, 2)
            assert tags["ranks"] == (4 if tags["scope"] == "world" else 2)
        busbw = {
            (m["tags"]["scope"], m["tags"].get("node")): m
            for m in found
            if m["name"] == "allreduce_busbw_gbps" and m["tags"]["tokens"] == tokens
        }
        assert len(busbw) == 4
        assert busbw[("world", None)]["tags"]["scope"] == "world"
    assert "node n2" in collector.text and "cross-node" in collector.text  # the human table


def test_verify_step_across_two_slurmd_nodes_splits_its_communication(executor):
    collector = Collector()
    recipe = {
        "kind": "verify_step",
        "params": {
            "backend": "gloo",
            "hidden_size": 64,
            "ffn_size": 128,
            "layers": 2,
            "tokens": 2,
            "dtype": "fp32",
            "iters": 3,
            "warmup": 1,
            "calls": 2,
        },
        "timeout_s": 240,
    }
    trial = _trial(executor, recipe, collector, requirements={"nodes": 2, "tasks_per_node": 2})
    trial.start()
    result = trial.wait()
    assert (result.outcome, result.exit_code) == ("exited", 0), collector.text[-3000:]
    found = _metrics_of(collector.text)
    (share,) = [m for m in found if m["name"] == "verify_comm_share"]
    assert 0 <= share["value"] <= 1
    assert (share["tags"]["scope"], share["tags"]["nodes"], share["tags"]["ranks_per_node"]) == ("world", 2, 2)
    isolated = [m for m in found if m["name"] == "verify_comm_isolated_ms"]
    assert [(m["tags"]["scope"], m["tags"].get("node_name")) for m in isolated] == [
        ("world", None),
        ("node", "n1"),
        ("node", "n2"),
        ("cross-node", None),
    ]
    assert all(m["value"] > 0 for m in isolated)
    assert "allreduce only, node n2" in collector.text


def test_the_recipe_timeout_cancels_the_job_as_timed_out(executor):
    collector = Collector()
    trial = _trial(
        executor,
        python_recipe("import time; print('slow', flush=True); time.sleep(600)", timeout_s=2),
        collector,
        grace_s=1.0,
    )
    trial.start()
    result = trial.wait()
    assert result.outcome == "timed_out" and "no result within 2s" in result.error
    assert known_job(trial.job_id)["state"] in ("CANCELLED", "FAILED")  # killed by SIGTERM, or by scancel
    assert collector.text.startswith("slow\n")  # then, maybe, slurmstepd's "*** JOB n CANCELLED ***"


def test_requirements_that_sbatch_must_not_take_are_refused(executor):
    collector = Collector()
    with pytest.raises(RecipeError, match="--output is set by the runner"):
        _trial(executor, python_recipe("print(1)"), collector, requirements={"sbatch": ["--output=/etc/x"]})
    with pytest.raises(RecipeError, match="not an sbatch option"):
        _trial(executor, python_recipe("print(1)"), collector, requirements={"sbatch": ["; rm -rf /"]})


def test_sbatch_refusal_is_a_clear_start_error(executor):
    collector = Collector()
    trial = _trial(
        executor, python_recipe("print(1)"), collector, requirements={"sbatch": ["--partition=no-such-partition"]}
    )
    with pytest.raises(OSError, match="(?i)partition"):
        trial.start()
