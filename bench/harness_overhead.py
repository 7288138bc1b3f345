"""Does the allreduce recipe's harness change what it measures? Runs the bare loop
(bench/bare_allreduce.py) and the recipe (python -m runners.recipes.allreduce) alternately on
this node (one untimed round of each first: the first process on a cold GPU runs slow), three
rounds each, and prints the median over rounds per (variant, tokens) and the ratio recipe/bare.

    python bench/harness_overhead.py [--out results.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {  # bare-loop name -> recipe flags
    "nccl_eager": ["--backend=nccl", "--mode=eager"],
    "nccl_graph": ["--backend=nccl", "--mode=graph"],
    "symm_mem_two_shot": ["--backend=symm_mem_two_shot", "--mode=eager"],
    "symm_mem_one_shot": ["--backend=symm_mem_one_shot", "--mode=eager"],
}
PREFIX = "@@campaign-metric "


def bare() -> dict[tuple[str, int], float]:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "bare_allreduce.py")], capture_output=True,
                         text=True, timeout=300, check=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {(r["variant"], r["tokens"]): r["median_us"] for r in rows if "median_us" in r}


def recipe() -> dict[tuple[str, int], float]:
    got = {}
    for variant, flags in VARIANTS.items():
        out = subprocess.run([sys.executable, "-m", "runners.recipes.allreduce", *flags], cwd=ROOT,
                             capture_output=True, text=True, timeout=300, check=True).stdout
        for line in out.splitlines():
            if line.startswith(PREFIX):
                m = json.loads(line[len(PREFIX):])
                if m["name"] == "allreduce_latency_us":
                    got[(variant, m["tags"]["tokens"])] = m["value"]
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    bare(), recipe()  # warm-up round, not counted
    runs = {"bare": [], "recipe": []}
    for _ in range(args.rounds):
        runs["bare"].append(bare())
        runs["recipe"].append(recipe())
    keys = sorted(set(runs["bare"][0]) & set(runs["recipe"][0]), key=lambda k: (k[0], k[1]))
    table = []
    print(f"{'variant':<20}{'tokens':>7}{'bare us':>10}{'recipe us':>11}{'ratio':>8}   (runs: bare / recipe)")
    for key in keys:
        b = statistics.median(r[key] for r in runs["bare"] if key in r)
        c = statistics.median(r[key] for r in runs["recipe"] if key in r)
        spread = " / ".join(",".join(f"{r[key]:.1f}" for r in runs[k] if key in r) for k in ("bare", "recipe"))
        table.append({"variant": key[0], "tokens": key[1], "bare_us": b, "recipe_us": c, "ratio": c / b})
        print(f"{key[0]:<20}{key[1]:>7}{b:>10.2f}{c:>11.2f}{c / b:>8.3f}   ({spread})")
    if args.out:
        args.out.write_text(json.dumps(table, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
