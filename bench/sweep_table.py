"""Markdown tables of a speculation sweep, from a results campaign file (`campaign export --with-results`):
T_base(b), verify compute over (batch, draft tokens), the draft step over batch, the wall-clock check,
and the compute-side break-even accept length tau*(b, k) = (k x T_draft(b) + T_verify(b, k)) / T_base(b)
(world size 1: no allreduce term).

    python bench/sweep_table.py docs/results/speculation-sweep-h200x1.yaml

Each figure is the median of its R samples with p10-p90; "cv" is the samples' coefficient of variation.
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

Point = dict[str, Any]


def load(path: Path) -> dict[str, list[list[Point]]]:
    """approach key -> the metric rows (name, value, tags, samples) of each of its succeeded trials, oldest first."""
    doc = yaml.safe_load(path.read_text())
    out: dict[str, list[list[Point]]] = defaultdict(list)
    for trial in doc.get("results") or []:
        if trial["state"] == "succeeded":
            out[trial["approach"]].append(trial["metrics"])
    return out


def cv(samples: list[float]) -> float:
    return statistics.pstdev(samples) / statistics.mean(samples)


def cell(m: Point) -> str:
    t = m["tags"]
    return f"{m['value']:.3f} ({t['p10_ms']:.3f}-{t['p90_ms']:.3f}, cv {cv(m['samples']):.1%})"


def by(rows: list[Point], name: str) -> dict[tuple[int, int], Point]:
    return {(m["tags"]["batch"], m["tags"].get("draft_tokens", 0)): m for m in rows if m["name"] == name}


def kv_table(rows: dict[str, list[Point]], base: dict[tuple[int, int], Point], key: str) -> None:
    """T_base(b) with no cache read, 1,024 and 4,096 positions per sequence, when the run has them."""
    no_kv, long = rows.get(f"{key}-no-kv"), rows.get(f"{key}-ctx4096")
    if not no_kv or not long:
        return
    none, wide = by(no_kv, "decode_step_ms"), by(long, "decode_step_ms")
    print()
    print("What the per-sequence cache reads cost in T_base(b) (decode step, graph), ms; GB read per step:")
    print()
    print("| batch | no cache read | context 1,024 | context 4,096 | + cache 1,024 | + cache 4,096 | GB at 4,096 |")
    print("|---|---|---|---|---|---|---|")
    for b, _ in sorted(base):
        n, c, w = none[(b, 0)]["value"], base[(b, 0)]["value"], wide[(b, 0)]["value"]
        gb = wide[(b, 0)]["tags"]["kv_bytes"] / 1e9
        print(f"| {b} | {n:.3f} | {c:.3f} | {w:.3f} | {c - n:.3f} | {w - n:.3f} | {gb:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", type=Path)
    ap.add_argument("--decode", default="decode-step-tp1-graph")
    ap.add_argument("--decode-eager", default="decode-step-tp1-eager")
    ap.add_argument("--verify", default="verify-step-tp1-graph")
    ap.add_argument("--draft", default="draft-step-graph")
    ap.add_argument("--draft-eager", default="draft-step-eager")
    ap.add_argument("--wall", default="verify-step-tp1-graph-wall")
    ap.add_argument("--draft-wall", default="draft-step-graph-wall")
    args = ap.parse_args()
    runs = load(args.file)
    rows = {key: trials[-1] for key, trials in runs.items()}  # the newest run: the one the report reads
    base = by(rows[args.decode], "decode_step_ms")
    base_eager = by(rows[args.decode_eager], "decode_step_ms")
    draft = by(rows[args.draft], "draft_step_ms")
    draft_eager = by(rows[args.draft_eager], "draft_step_ms")
    verify = by(rows[args.verify], "verify_compute_ms")
    batches = sorted(b for b, _ in base)
    ks = sorted({k for _, k in verify})

    print("| batch | T_base graph, ms (p10-p90, cv) | T_base eager, ms | draft step graph, ms | draft step eager, ms |")
    print("|---|---|---|---|---|")
    for b in batches:
        eager = base_eager.get((b, 0))
        print(
            f"| {b} | {cell(base[(b, 0)])} | {cell(eager) if eager else '-'} | {cell(draft[(b, 0)])} | "
            f"{cell(draft_eager[(b, 0)]) if (b, 0) in draft_eager else '-'} |"
        )
    print()
    print("Verify compute, ms (median of 20 graph replays; the largest p90/median over the row in brackets):")
    print()
    print("| batch | " + " | ".join(f"k={k}" for k in ks) + " |")
    print("|---|" + "---|" * len(ks))
    for b in batches:
        spread = max(verify[(b, k)]["tags"]["p90_ms"] / verify[(b, k)]["value"] for k in ks)
        print(f"| {b} [{spread:.3f}] | " + " | ".join(f"{verify[(b, k)]['value']:.2f}" for k in ks) + " |")
    print()
    print("tau*(b, k) = (k x T_draft(b) + T_verify(b, k)) / T_base(b): the accept length above which speculation")
    print("pays on compute alone (TP 1, no allreduce; graph figures):")
    print()
    print("| batch | " + " | ".join(f"k={k}" for k in ks) + " |")
    print("|---|" + "---|" * len(ks))
    for b in batches:
        tb, td = base[(b, 0)]["value"], draft[(b, 0)]["value"]
        taus = [(k * td + verify[(b, k)]["value"]) / tb for k in ks]
        print(f"| {b} | " + " | ".join(f"{t:.2f}" for t in taus) + " |")
    print()
    print("The same graphs timed by the wall clock (a synchronize at each mark) against CUDA events, same run:")
    print()
    print("| figure | batch | k | CUDA events, ms | wall clock, ms | wall / events |")
    print("|---|---|---|---|---|---|")
    wall_rows = rows[args.wall]
    for name, events in (("decode_step_ms", base), ("verify_compute_ms", verify)):
        for (b, k), m in sorted(by(wall_rows, name).items()):
            if name == "verify_compute_ms" and k == 0:
                continue
            e = events[(b, k)]
            print(f"| {name} | {b} | {k} | {e['value']:.3f} | {m['value']:.3f} | {m['value'] / e['value']:.4f} |")
    for (b, _), m in sorted(by(rows[args.draft_wall], "draft_step_ms").items()):
        e = draft[(b, 0)]
        print(f"| draft_step_ms | {b} | - | {e['value']:.3f} | {m['value']:.3f} | {m['value'] / e['value']:.4f} |")
    kv_table(rows, base, args.decode)
    if len(runs[args.decode]) < 2:
        return
    print()
    print("Run to run (each run a fresh machine; the newest is the one above), ms:")
    print()
    print(
        "| figure | batch | k | "
        + " | ".join(f"run {i + 1}" for i in range(len(runs[args.decode])))
        + " | last / first |"
    )
    print("|---|---|---|" + "---|" * (len(runs[args.decode]) + 1))
    for name, key, points in (
        ("decode_step_ms", args.decode, [(b, 0) for b in batches]),
        ("verify_compute_ms", args.verify, [(b, k) for b in (1, 16, 64, 128) for k in (1, 3, 6, 7)]),
        ("draft_step_ms", args.draft, [(b, 0) for b in (1, 16, 128)]),
    ):
        per_run = [by(trial, name) for trial in runs[key]]
        for b, k in points:
            values = [r[(b, k)]["value"] for r in per_run if (b, k) in r]
            kk = "-" if name == "draft_step_ms" else k
            print(
                f"| {name} | {b} | {kk} | "
                + " | ".join(f"{v:.3f}" for v in values)
                + f" | {values[-1] / values[0]:.3f} |"
            )


if __name__ == "__main__":
    main()
