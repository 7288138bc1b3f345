"""Does the allreduce recipe's harness change what it measures? Runs the bare loop
(bench/bare_allreduce.py) and the recipe (python -m runners.recipes.allreduce) alternately on
this node (one untimed round of each first: the first process on a cold GPU runs slow), three
rounds each, and prints, per (variant, tokens), the median over rounds of each program's median and
p10 latency and the ratios recipe/bare (p10 is less exposed to launch jitter than the median).

    python bench/harness_overhead.py [--out results.json]
"""
from __future__ import annotations

import argparse
import json
import math
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


def bare() -> dict[tuple[str, int], tuple[float, float]]:
    """(variant, tokens) -> (median us, p10 us)."""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "bare_allreduce.py")], capture_output=True,
                         text=True, timeout=300, check=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {(r["variant"], r["tokens"]): (r["median_us"], r["p10_us"]) for r in rows if "median_us" in r}


def recipe() -> dict[tuple[str, int], tuple[float, float]]:
    got = {}
    for variant, flags in VARIANTS.items():
        out = subprocess.run([sys.executable, "-m", "runners.recipes.allreduce", *flags], cwd=ROOT,
                             capture_output=True, text=True, timeout=300, check=True).stdout
        for line in out.splitlines():
            if line.startswith(PREFIX):
                m = json.loads(line[len(PREFIX):])
                if m["name"] == "allreduce_latency_us":
                    got[(variant, m["tags"]["tokens"])] = (m["value"], m["tags"]["p10_us"])
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
    print(f"{'variant':<20}{'tokens':>7}{'bare med':>10}{'recipe med':>11}{'ratio':>7}"
          f"{'bare p10':>10}{'recipe p10':>11}{'ratio':>7}")
    for key in keys:
        row = {"variant": key[0], "tokens": key[1]}
        for i, stat in enumerate(("median", "p10")):
            b = statistics.median(r[key][i] for r in runs["bare"] if key in r)
            c = statistics.median(r[key][i] for r in runs["recipe"] if key in r)
            row.update({f"bare_{stat}_us": b, f"recipe_{stat}_us": c, f"ratio_{stat}": c / b,
                        f"bare_{stat}_rounds": [r[key][i] for r in runs["bare"] if key in r],
                        f"recipe_{stat}_rounds": [r[key][i] for r in runs["recipe"] if key in r]})
        table.append(row)
        print(f"{key[0]:<20}{key[1]:>7}{row['bare_median_us']:>10.2f}{row['recipe_median_us']:>11.2f}"
              f"{row['ratio_median']:>7.3f}{row['bare_p10_us']:>10.2f}{row['recipe_p10_us']:>11.2f}{row['ratio_p10']:>7.3f}")
    for stat in ("median", "p10"):
        ratios = [row[f"ratio_{stat}"] for row in table]
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"geometric mean of recipe/bare ({stat}) over {len(ratios)} pairs: {geo:.3f}")
    if args.out:
        args.out.write_text(json.dumps(table, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
