"""Turn a campaign's metrics CSV (GET /campaigns/<slug>/metrics.csv) into the Markdown tables of
docs/results.md: allreduce latency per approach and message size, and the verify-step figures.

    python bench/results_table.py docs/results/allreduce-shootout-h200x2-metrics.csv
"""

from __future__ import annotations

import csv
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.protocol.metrics import MetricName as M


def main(path: str) -> None:
    rows = list(csv.DictReader(open(path)))
    latency: dict[str, dict[int, tuple[float, dict]]] = defaultdict(dict)
    busbw: dict[tuple[str, int], float] = {}
    verify: dict[str, dict[str, float]] = defaultdict(dict)
    tags_of: dict[str, dict] = {}
    per_call: dict[tuple[str, int], float] = {}
    steps: list[tuple[str, str, float, dict]] = []
    for r in rows:
        tags = json.loads(r["tags"])
        value = float(r["value"])
        if r["name"] == M.ALLREDUCE_LATENCY_US:
            latency[r["approach"]][int(tags["tokens"])] = (value, tags)
            tags_of[r["approach"]] = tags
        elif r["name"] == M.ALLREDUCE_BUSBW_GBPS:
            busbw[(r["approach"], int(tags["tokens"]))] = value
        elif r["name"] == M.ALLREDUCE_PER_CALL_US:
            per_call[(r["approach"], int(tags["tokens"]))] = value
        elif r["name"] in (M.DECODE_STEP_MS, M.DRAFT_STEP_MS):
            steps.append((r["approach"], r["name"], value, tags))
        elif r["name"].startswith(("verify_", "allreduce_in_situ", "allreduce_isolated")):
            verify[r["approach"]][r["name"]] = value
            tags_of.setdefault(r["approach"], tags)
    sizes = sorted({t for v in latency.values() for t in v})
    print(
        "| approach | backend | mode | method | NCCL env | "
        + " | ".join(f"{t} tok ({t * 7168 * 2 // 1024} KiB)" for t in sizes)
        + " |"
    )
    print("|---|---|---|---|---|" + "---|" * len(sizes))
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
        method = tags.get("method") or (
            "graph-replay" if tags["mode"] == "graph" else "per-call-events (before issue 9)"
        )
        print(f"| {approach} | {tags['backend']} | {tags['mode']} | {method} | {env} | " + " | ".join(cells) + " |")
    if per_call:
        print()
        print("Per-call event timing (allreduce_per_call_us, never the headline), us:")
        print()
        print("| approach | " + " | ".join(f"{t} tok" for t in sizes) + " |")
        print("|---|" + "---|" * len(sizes))
        for approach in sorted({a for a, _ in per_call}):
            print(
                f"| {approach} | "
                + " | ".join(f"{per_call[(approach, t)]:.1f}" if (approach, t) in per_call else "-" for t in sizes)
                + " |"
            )
    print()
    print(
        "| approach | verify step (ms) | compute only (ms) | communication in situ (ms) | share | per allreduce in situ (us) | allreduce only, isolated (us) |"
    )
    print("|---|---|---|---|---|---|---|")
    for approach, m in verify.items():
        print(
            f"| {approach} | {m.get('verify_time_ms', float('nan')):.2f} | {m.get('verify_compute_ms', float('nan')):.2f} | "
            f"{m.get('verify_comm_ms', float('nan')):.2f} | {100 * m.get('verify_comm_share', float('nan')):.1f}% | "
            f"{m.get('allreduce_in_situ_us', float('nan')):.1f} | {m.get('allreduce_isolated_us', float('nan')):.1f} |"
        )

    if steps:
        print()
        print("| approach | metric | ms | backend | mode | method | device | scaled |")
        print("|---|---|---|---|---|---|---|---|")
        for approach, name, value, tags in steps:
            print(
                f"| {approach} | {name} | {value:.3f} | {tags.get('backend', '-')} | {tags.get('mode')} | "
                f"{tags.get('method')} | {tags.get('device')} | {tags.get('scaled')} |"
            )


if __name__ == "__main__":
    main(sys.argv[1])
