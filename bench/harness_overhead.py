"""Does the allreduce recipe measure what an independent loop measures? Recipe vs bare loop, by method.

The recipe's headline is the nccl-tests method (eager: K calls back to back between two CUDA
events / K) or a graph replay / N. The bare loop (bench/bare_allreduce.py, which shares no code
with the recipe) times the same calls by two *other* methods: per-call event pairs, and wall clock
(synchronize + perf_counter around K calls). A ratio recipe/bare far from 1 for one method only is
a method artefact (per-call events inflate eager collectives: their records sit in the launch
path); far from 1 for both is harness overhead. Rounds alternate bare and recipe processes;
figures are the median over rounds of each program's median (and p10).

    python bench/harness_overhead.py --out results.json                      # GPU: nccl + symm-mem, eager + graph
    python bench/harness_overhead.py --variants gloo:eager --hidden 256 --tokens 1,4 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from app.protocol.metrics import MetricName, parse_metric_line  # noqa: E402

GPU_VARIANTS = (
    "nccl:eager,nccl:graph,symm_mem_two_shot:eager,symm_mem_two_shot:graph,"
    "symm_mem_one_shot:eager,symm_mem_one_shot:graph"
)
BARE_METHODS = ("per-call-events", "wall-clock")


def run(cmd: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    """Run a program in its own process group; on timeout or interruption stop the whole group
    (a recipe's rank processes or a bare loop's spawned workers must not outlive it)."""
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=5)
                break
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def bare(args) -> dict[tuple[str, int, str], tuple[float, float]]:
    """(variant, tokens, method) -> (median us, p10 us)."""
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "bare_allreduce.py"),
        f"--variants={args.variants}",
        f"--tokens={args.tokens}",
        f"--hidden={args.hidden}",
        f"--dtype={args.dtype}",
        f"--iters={args.iters}",
        f"--calls={args.calls}",
    ]
    if args.world_size:
        cmd.append(f"--world-size={args.world_size}")
    try:
        done = run(cmd, args.timeout_s)
    except subprocess.TimeoutExpired:
        print(f"bare loop: no result within {args.timeout_s}s", file=sys.stderr)
        return {}
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    for row in rows:
        if "error" in row:
            print(f"bare loop: {row['variant']} tokens={row['tokens']}: {row['error']}", file=sys.stderr)
    if done.returncode != 0:
        print(f"bare loop exited {done.returncode}: {done.stderr[-2000:]}", file=sys.stderr)
    return {(r["variant"], r["tokens"], r["method"]): (r["median_us"], r["p10_us"]) for r in rows if "median_us" in r}


def recipe(args) -> dict[tuple[str, int, str], tuple[float, float]]:
    """(variant, tokens, method) -> (median us, p10 us) of the recipe's headline metric."""
    got = {}
    for variant in args.variants.split(","):
        backend, mode = variant.split(":")
        cmd = [
            sys.executable,
            "-m",
            "runners.recipes.allreduce",
            f"--backend={backend}",
            f"--mode={mode}",
            f"--tokens={args.tokens}",
            f"--hidden-size={args.hidden}",
            f"--dtype={args.dtype}",
            f"--iters={args.iters}",
            f"--calls={args.calls}",
            "--per-call-iters=0",
        ]
        if args.world_size:
            cmd.append(f"--world-size={args.world_size}")
        try:
            done = run(cmd, args.timeout_s)
        except subprocess.TimeoutExpired:
            print(f"recipe {variant}: no result within {args.timeout_s}s", file=sys.stderr)
            continue
        if done.returncode != 0:
            print(f"recipe {variant} exited {done.returncode}: {done.stderr[-2000:]}", file=sys.stderr)
        for line in done.stdout.splitlines():
            m = parse_metric_line(line)
            if m and m["name"] == MetricName.ALLREDUCE_LATENCY_US:
                got[(variant, m["tags"]["tokens"], m["tags"]["method"])] = (m["value"], m["tags"]["p10_us"])
    return got


def compare(bare_runs: list[dict], recipe_runs: list[dict]) -> list[dict]:
    """One row per (variant, tokens, bare method): medians over rounds and recipe/bare ratios."""
    table = []
    recipe_keys = sorted({k for run in recipe_runs for k in run})
    for variant, tokens, recipe_method in recipe_keys:
        rec = [run[(variant, tokens, recipe_method)] for run in recipe_runs if (variant, tokens, recipe_method) in run]
        for method in BARE_METHODS:
            got = [run[(variant, tokens, method)] for run in bare_runs if (variant, tokens, method) in run]
            if not got:
                continue
            row = {"variant": variant, "tokens": tokens, "recipe_method": recipe_method, "bare_method": method}
            for i, stat in enumerate(("median", "p10")):
                r = statistics.median(x[i] for x in rec)
                b = statistics.median(x[i] for x in got)
                row.update(
                    {
                        f"recipe_{stat}_us": r,
                        f"bare_{stat}_us": b,
                        f"ratio_{stat}": r / b if b else None,
                        f"recipe_{stat}_rounds": [x[i] for x in rec],
                        f"bare_{stat}_rounds": [x[i] for x in got],
                    }
                )
            table.append(row)
    return table


def print_table(table: list[dict]) -> None:
    print(
        f"{'variant':<26}{'tokens':>7} {'recipe method':<14}{'recipe med':>11} {'bare method':<16}"
        f"{'bare med':>10}{'ratio':>7}{'recipe p10':>11}{'bare p10':>10}{'ratio':>7}"
    )
    for row in table:
        print(
            f"{row['variant']:<26}{row['tokens']:>7} {row['recipe_method']:<14}{row['recipe_median_us']:>11.2f} "
            f"{row['bare_method']:<16}{row['bare_median_us']:>10.2f}{row['ratio_median'] or 0:>7.3f}"
            f"{row['recipe_p10_us']:>11.2f}{row['bare_p10_us']:>10.2f}{row['ratio_p10'] or 0:>7.3f}"
        )
    for method in BARE_METHODS:
        ratios = [row["ratio_median"] for row in table if row["bare_method"] == method and row["ratio_median"]]
        if ratios:
            geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
            print(f"recipe / bare {method}: geometric mean of median ratios over {len(ratios)} pairs: {geo:.3f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default=GPU_VARIANTS, help="backend:mode,... (CPU: gloo:eager)")
    ap.add_argument("--tokens", default="1,4,8,64")
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--world-size", type=int, default=None)
    ap.add_argument("--iters", type=int, default=20, help="samples per size (both programs)")
    ap.add_argument("--calls", type=int, default=100, help="back-to-back calls per sample (both programs)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup-rounds", type=int, default=1, help="untimed rounds first (a cold GPU runs slow)")
    ap.add_argument("--timeout-s", type=float, default=240, help="per program run")
    ap.add_argument("--out", type=Path, help="write the table as JSON here")
    args = ap.parse_args()

    def on_term(signum: int, _frame) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    bare_runs: list[dict] = []
    recipe_runs: list[dict] = []
    try:
        for _ in range(args.warmup_rounds):
            bare(args), recipe(args)
        for done in range(1, args.rounds + 1):
            bare_runs.append(bare(args))
            recipe_runs.append(recipe(args))
            if args.out:  # after every round: a session cut short still leaves its figures
                write(args, compare(bare_runs, recipe_runs), done)
    except KeyboardInterrupt as exc:
        print(f"stopped ({exc}) after {len(recipe_runs)} complete round(s)", file=sys.stderr)
        bare_runs = bare_runs[: len(recipe_runs)]
    table = compare(bare_runs, recipe_runs)
    print_table(table)
    if args.out:
        write(args, table, len(recipe_runs))
    if not table:
        print("no comparable results (see the errors above)", file=sys.stderr)
        return 1
    return 0


def write(args, table: list[dict], rounds_done: int) -> None:
    args.out.write_text(
        json.dumps(
            {"args": {k: str(v) for k, v in vars(args).items()}, "rounds_done": rounds_done, "rows": table}, indent=2
        )
    )


if __name__ == "__main__":
    sys.exit(main())
