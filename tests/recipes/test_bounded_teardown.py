"""`exit_after_teardown`: a rank (or a preflight probe) whose process-group teardown hangs still exits
with its own code once the bound passes; one whose teardown finishes exits at once, silently.
Seen on 2x H200: the graph_collective probe printed its pass, then hung in destroy_process_group
until preflight's timeout turned the pass into a failure."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

SCRIPT = textwrap.dedent(
    """
    import sys, time
    import torch.distributed as dist
    from runners.recipes._dist import exit_after_teardown

    dist.init_process_group("gloo", init_method="file://{store}", rank=0, world_size=1)
    if {hang}:
        dist.destroy_process_group = lambda: time.sleep(3600)  # the NCCL teardown hang, on gloo
    print("verdict printed before teardown", flush=True)
    exit_after_teardown(3, 0.5, "probe rank 0")
    """
)


def run(tmp_path, hang: bool) -> subprocess.CompletedProcess:
    script = SCRIPT.format(store=tmp_path / "store", hang=hang)
    # The timeout only guards the test run against a real hang; nothing here is timed.
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def test_a_hung_teardown_still_exits_with_the_code(tmp_path):
    done = run(tmp_path, hang=True)
    assert done.returncode == 3, done.stderr
    assert "verdict printed before teardown" in done.stdout
    assert "probe rank 0: process-group teardown did not finish within 0.5s; exiting anyway" in done.stderr


def test_a_clean_teardown_exits_with_the_code_and_no_warning(tmp_path):
    done = run(tmp_path, hang=False)
    assert done.returncode == 3, done.stderr
    assert "did not finish" not in done.stderr
