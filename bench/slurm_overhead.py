"""What the SLURM path costs against a local trial: a real `campaign serve` (SQLite), a real
`campaign runner` (local executor, then `--executor slurm` on the one-machine cluster of
scripts/ensure-slurm), the same trial programs, a websocket viewer of the live log.

    scripts/ensure-slurm && SLURM_CONF=/tmp/campaign-slurm/slurm.conf .venv/bin/python bench/slurm_overhead.py

Prints per executor: "Run next" -> the trial's first line at the viewer (median and max over
--trials runs; split into Run next -> the program's first print, and print -> viewer), and
print -> viewer latency p50/p99 while a trial prints --rate lines/s for --seconds. Reuses the
board, viewer and trial program of bench/log_pipeline.py. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.log_pipeline import PACED, Board, pct  # noqa: E402

FIRST = """
import time
print(f"0 {time.time_ns()} first", flush=True)
"""


def use_slurm_runner(board: Board) -> None:
    """Replace the board's local runner by a `--executor slurm` runner (its own token and spool)."""
    os.killpg(board.runner.pid, signal.SIGTERM)
    board.runner.wait(30)
    token = board.cli("runners", "create", "bench-slurm")
    log = open(board.dir / "runner-slurm.log", "w")
    board.runner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app.cli",
            "runner",
            "--server",
            board.url,
            "--spool-dir",
            str(board.dir / "spool-slurm"),
            "--name",
            "bench-slurm",
            "--executor",
            "slurm",
        ],
        env={**board.env, "CAMPAIGN_RUNNER_TOKEN": token},
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    board.procs.append(board.runner)
    import httpx

    for _ in range(600):
        runners = httpx.get(board.url + "/api/runners", headers=board.api).json()
        if any(r["name"] == "bench-slurm" and r["status"] == "online" for r in runners):
            return
        time.sleep(0.1)
    raise RuntimeError("the SLURM runner did not connect")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5, help="first-line runs per executor")
    ap.add_argument("--rate", type=int, default=200, help="lines/s of the streaming run")
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    if not os.environ.get("SLURM_CONF"):
        print("set SLURM_CONF (scripts/ensure-slurm prints it)", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="slurm-bench-") as tmp:
        board = Board(Path(tmp))
        board.start()
        try:
            for executor in ("local", "slurm"):
                if executor == "slurm":
                    use_slurm_runner(board)
                slugs = [f"{executor}-first-{i}" for i in range(args.trials)]
                paced = f"{executor}-paced"
                board.seed([(s, FIRST) for s in slugs] + [(paced, PACED.format(rate=args.rate, seconds=args.seconds))])
                firsts = [measure_first(board, s) for s in slugs]
                viewer = paced_latency(board, paced)
                rows.append((executor, firsts, viewer))
        finally:
            board.stop()
    print(
        f"\n{'executor':<8} {'run next -> first line at viewer (ms)':>40} {'run next -> print':>18} "
        f"{'print -> viewer':>16} {'streaming p50 / p99 (ms)':>26}"
    )
    for executor, firsts, viewer in rows:
        totals = [f[0] for f in firsts]
        starts = [f[1] for f in firsts]
        hops = [f[2] for f in firsts]
        print(
            f"{executor:<8} {'median ' + format(statistics.median(totals), '.0f') + ', max ' + format(max(totals), '.0f'):>40} "
            f"{statistics.median(starts):>18.0f} {statistics.median(hops):>16.0f} "
            f"{format(pct(viewer.latencies, 50), '.1f') + ' / ' + format(pct(viewer.latencies, 99), '.1f'):>26}"
        )
    return 0


def measure_first(board: Board, slug: str) -> tuple[float, float, float]:
    t0 = time.time_ns()
    tid = board.run_next(slug)
    viewer = board.viewer(tid, expected=1)
    viewer.start()
    if not viewer.done.wait(120) or not viewer.latencies:
        raise RuntimeError(f"trial {tid}: the first line did not reach the viewer")
    viewer.stop = True
    print_to_viewer = viewer.latencies[0]  # the line carries its print time
    # The chunk that brought the program's first line: the last one in when the viewer had it (before it,
    # a local trial's log has the runner's own line, written as it spawned the program).
    arrived_ns = viewer.chunk_times[max(viewer.chunk_times)]
    total = (arrived_ns - t0) / 1e6
    board.wait_done(tid)
    print(f"  {slug}: run next -> viewer {total:.0f} ms (print -> viewer {print_to_viewer:.0f} ms)", flush=True)
    return total, total - print_to_viewer, print_to_viewer


def paced_latency(board: Board, slug: str):
    tid = board.run_next(slug)
    viewer = board.viewer(tid, expected=None)
    viewer.start()
    board.wait_done(tid)
    lines, _, _ = board.stored(tid)
    viewer.expected = lines
    viewer.done.wait(30)
    viewer.stop = True
    print(
        f"  {slug}: {lines} lines, print -> viewer p50 {pct(viewer.latencies, 50):.1f} ms, "
        f"p99 {pct(viewer.latencies, 99):.1f} ms, lost {lines - len(viewer.seen)}, duplicated {viewer.dups}",
        flush=True,
    )
    return viewer


if __name__ == "__main__":
    sys.exit(main())
