"""Artifact upload into a real `campaign serve` (its own process, SQLite): a file of --size-mb uploaded by the
runner's client (runners/artifacts.py: 4 MiB PUTs, then the completion with its sha256), timed with the wall
clock, the server's RSS sampled every 50 ms with psutil (its growth over the idle server is the figure:
streamed, never held in memory); then a profiler trace of --trace-mb read by app/domain/traces.py in a fresh
process (time, peak RSS).

    .venv/bin/python bench/artifacts.py --size-mb 1024 --trace-mb 200
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from app.db import make_engine, session_scope  # noqa: E402
from app.domain.scheduling import create_trial  # noqa: E402
from app.domain.trials import end_trial  # noqa: E402
from app.models import Approach, Campaign, Runner, TrialState  # noqa: E402
from runners.artifacts import Client  # noqa: E402
from tests.support.servers import start_live_server, stop_live_server  # noqa: E402
from tests.support.trials import new_runner_token  # noqa: E402


def _trial(db_url: str) -> tuple[int, str]:
    engine = make_engine(db_url)
    runner_id, token = new_runner_token(engine, "bench-node")
    with session_scope(engine) as session:
        campaign = Campaign(slug="bench", name="Bench")
        session.add(campaign)
        session.flush()
        approach = Approach(campaign_id=campaign.id or 0, key="a", title="A", position=1)
        session.add(approach)
        session.flush()
        trial = create_trial(session, approach, session.get(Runner, runner_id), "bench")
        end_trial(session, trial, TrialState.succeeded)
        trial_id = trial.id or 0
    engine.dispose()
    return trial_id, token


def upload(size_mb: int) -> None:
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        path = Path(tmp) / "blob.bin"
        with path.open("wb") as f:
            block = os.urandom(1 << 20)
            for _ in range(size_mb):
                f.write(block)
        db_url = f"sqlite:///{tmp}/bench.db"
        server = start_live_server(Path(tmp), db_url, "--no-runner", "--workers", "0")
        try:
            trial_id, token = _trial(db_url)
            proc = psutil.Process(server.proc.pid)
            procs = [proc, *proc.children(recursive=True)]
            idle = sum(p.memory_info().rss for p in procs)
            peak = [idle]
            done = threading.Event()

            def sample() -> None:
                while not done.is_set():
                    peak[0] = max(peak[0], sum(p.memory_info().rss for p in procs if p.is_running()))
                    time.sleep(0.05)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            start = time.perf_counter()
            cpu0 = sum(p.cpu_times().user + p.cpu_times().system for p in procs)
            result = Client(server.url, token).upload(trial_id, "blob.bin", path)
            wall = time.perf_counter() - start
            cpu = sum(p.cpu_times().user + p.cpu_times().system for p in procs) - cpu0
            done.set()
            sampler.join()
            assert result.size == size_mb << 20
            print(
                f"upload {size_mb} MiB: {wall:.1f} s wall, {size_mb / wall:.0f} MiB/s; server CPU {cpu:.1f} s; "
                f"server RSS idle {idle / 2**20:.0f} MiB, peak {peak[0] / 2**20:.0f} MiB "
                f"(growth {(peak[0] - idle) / 2**20:.1f} MiB)"
            )
        finally:
            stop_live_server(server)


def trace(trace_mb: int) -> None:
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        path = Path(tmp) / "big.trace.json"
        row = (
            '{"ph": "X", "cat": "kernel", "name": "gemm_%d", "pid": 0, "tid": 7, "ts": %d, "dur": 3.5, '
            '"args": {"correlation": %d, "stream": 7, "grid": [1, 2, 3]}}'
        )
        with path.open("w") as f:
            f.write(
                '{"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "verify_step", "pid": 1, "ts": 0, "dur": 1e12}'
            )
            i = 0
            while f.tell() < trace_mb << 20:
                f.write("," + row % (i % 50, i, i))
                i += 1
            f.write("]}")
        probe = (
            "import resource, sys, time; from pathlib import Path; from app.domain.traces import read_trace;"
            "rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024; before = rss();"
            "t = time.perf_counter(); s = read_trace(Path(sys.argv[1])); t = time.perf_counter() - t;"
            "print(f'{t:.1f} {before:.0f} {rss():.0f} {sum(r.calls for r in s.rows)}')"
        )
        out = subprocess.run(
            [sys.executable, "-c", probe, str(path)], capture_output=True, text=True, check=True, cwd=ROOT
        )
        seconds, before, after, events = out.stdout.split()
        size = path.stat().st_size / 2**20
        print(
            f"trace {size:.0f} MiB ({events} kernels): read in {seconds} s ({size / float(seconds):.0f} MiB/s); "
            f"peak RSS {after} MiB, {int(after) - int(before)} MiB over the process before reading"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--trace-mb", type=int, default=200)
    args = parser.parse_args()
    upload(args.size_mb)
    trace(args.trace_mb)
