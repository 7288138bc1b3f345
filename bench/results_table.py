"""Turn a campaign's metrics CSV (GET /campaigns/<slug>/metrics.csv) into the Markdown tables of
docs/results.md: allreduce latency per approach and message size, and the verify-step figures.

    python bench/results_table.py docs/results/allreduce-shootout-h200x2-metrics.csv
"""
from __future__ import annotations

import csv
import json
import sys
from collections import defaultdict


def main(path: str) -> None:
    rows = list(csv.DictReader(open(path)))
    latency: dict[str, dict[int, tuple[float, dict]]] = defaultdict(dict)
    busbw: dict[tuple[str, int], float] = {}
    verify: dict[str, dict[str, float]] = defaultdict(dict)
    tags_of: dict[str, dict] = {}
    for r in rows:
        tags = json.loads(r["tags"])
        value = float(r["value"])
        if r["name"] == "allreduce_latency_us":
            latency[r["approach"]][int(tags["tokens"])] = (value, tags)
            tags_of[r["approach"]] = tags
        elif r["name"] == "allreduce_busbw_gbps":
            busbw[(r["approach"], int(tags["tokens"]))] = value
        elif r["name"].startswith(("verify_", "allreduce_in_situ", "allreduce_isolated")):
            verify[r["approach"]][r["name"]] = value
            tags_of.setdefault(r["approach"], tags)
    sizes = sorted({t for v in latency.values() for t in v})
    print("| approach | backend | mode | NCCL env | " + " | ".join(f"{t} tok ({t * 7168 * 2 // 1024} KiB)" for t in sizes) + " |")
    print("|---|---|---|---|" + "---|" * len(sizes))
    for approach, by_size in latency.items():
        tags = tags_of[approach]
        env = " ".join(f"{k.upper()}={v}" for k, v in sorted(tags.items()) if k.startswith("nccl_")) or "-"
        cells = []
        for t in sizes:
            if t in by_size:
                v, tg = by_size[t]
                cells.append(f"{v:.1f} (p10 {tg['p10_us']:.1f}, p90 {tg['p90_us']:.1f})")
            else:
                cells.append("-")
        print(f"| {approach} | {tags['backend']} | {tags['mode']} | {env} | " + " | ".join(cells) + " |")
    print()
    print("| approach | verify step (ms) | compute only (ms) | communication in situ (ms) | share | per allreduce in situ (us) | allreduce only, isolated (us) |")
    print("|---|---|---|---|---|---|---|")
    for approach, m in verify.items():
        print(f"| {approach} | {m.get('verify_time_ms', float('nan')):.2f} | {m.get('verify_compute_ms', float('nan')):.2f} | "
              f"{m.get('verify_comm_ms', float('nan')):.2f} | {100 * m.get('verify_comm_share', float('nan')):.1f}% | "
              f"{m.get('allreduce_in_situ_us', float('nan')):.1f} | {m.get('allreduce_isolated_us', float('nan')):.1f} |")


if __name__ == "__main__":
    main(sys.argv[1])
