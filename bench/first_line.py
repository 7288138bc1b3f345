"""How long a trial's page stays blank: "Run next" -> each of the first lines at a websocket viewer of the live
log, for a command and for the torch recipes, on a real `campaign serve` (SQLite) and `campaign runner`.

    .venv/bin/python bench/first_line.py [--trials 3]

Prints per recipe (median over --trials runs, ms after the Run next answer): the runner's own line, the
recipe's first line (for a torch recipe, the phase `importing torch`) and, for a torch recipe, the line
saying torch has loaded. Reuses the board and viewer of bench/log_pipeline.py. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.log_pipeline import Board  # noqa: E402
from runners.process import STARTED_PREFIX  # noqa: E402

GLOO = {"backend": "gloo", "world_size": 2, "hidden_size": 64, "warmup": 1, "iters": 2, "calls": 1}
RECIPES = {
    "command": {"kind": "command", "params": {"argv": ["bash", "-c", "echo hello from bash"]}},
    "allreduce gloo": {"kind": "allreduce", "params": {**GLOO, "tokens": [1], "per_call_iters": 0}},
    "verify_step gloo": {"kind": "verify_step", "params": {**GLOO, "ffn_size": 128, "layers": 2, "tokens": 1}},
    "draft_step cpu": {
        "kind": "draft_step",
        "params": {"device": "cpu", "dtype": "fp32", "hidden_size": 64, "vocab_size": 128, "ffn_size": 128},
    },
}


def first_lines(board: Board, slug: str) -> tuple[float, float, float | None]:
    """(runner's line, the recipe's first line, torch loaded) at the viewer, ms after Run next answered."""
    tid = board.run_next(slug)
    answered = time.time_ns()
    viewer = board.viewer(tid, expected=None)
    viewer.start()
    board.wait_done(tid)
    time.sleep(0.5)  # the last chunks reach the viewer
    viewer.stop = True
    con = sqlite3.connect(board.db)
    chunks = con.execute('select seq, data from log_chunk where trial_id=? and "offset">=0 order by seq', (tid,))
    rows = [(seq, data) for seq, data in chunks]
    con.close()

    def at(test) -> float | None:
        seq = next((seq for seq, data in rows if test(data)), None)
        arrived = viewer.chunk_times.get(seq) if seq is not None else None
        return None if arrived is None else (arrived - answered) / 1e6

    runner = at(lambda data: data.startswith(STARTED_PREFIX))
    recipe = at(lambda data: not data.startswith(STARTED_PREFIX))
    loaded = at(lambda data: " imported in " in data)
    if runner is None or recipe is None:
        raise RuntimeError(f"trial {tid}: its first lines did not reach the viewer")
    return runner, recipe, loaded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=3, help="runs per recipe")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="first-line-") as work:
        board = Board(Path(work))
        try:
            board.start()
            rows = []
            for name, recipe in RECIPES.items():
                slugs = [f"{name.replace(' ', '-').replace('_', '-')}-{i}" for i in range(args.trials)]
                for slug in slugs:
                    board.add_campaign(slug, [{"key": "a", "title": name, "recipe": {**recipe, "timeout_s": 300}}])
                runs = [first_lines(board, slug) for slug in slugs]
                rows.append((name, runs))
                print(f"  {name}: {runs}", flush=True)
        finally:
            for proc in board.procs:
                proc.terminate()
    print(f"\n{'recipe':<18} {'runner line (ms)':>17} {'recipe first line':>18} {'torch loaded':>13}")
    for name, runs in rows:
        loaded = [r[2] for r in runs if r[2] is not None]
        print(
            f"{name:<18} {statistics.median(r[0] for r in runs):>17.0f} {statistics.median(r[1] for r in runs):>18.0f}"
            f" {statistics.median(loaded) if loaded else float('nan'):>13.0f}"
        )


if __name__ == "__main__":
    main()
