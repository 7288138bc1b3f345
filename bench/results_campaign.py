"""Turn a node's shootout (the campaign file and metrics CSV that bench/shootout_on_node.py exports)
into a results campaign that draws its profitability answer on import, with no further input:

- the model inputs measured on the node, each with its source: T_base from the fastest synthetic plain
  decode step (entered as baseline_tok_s = 1000 / T_base), the draft head step (graph mode preferred),
  the verify step's compute;
- one reported figure per allreduce approach at the verify message size (its headline method and
  spread in the source), and one per verify-step approach for its allreduce *in situ* (the step with
  allreduces minus the same step without, / N);
- and prints the break-even accept length tau* for each figure, from the product's own model
  (app.domain.answer.BreakEvenCurve), plus tau* from the measured verify steps directly.

    python bench/results_campaign.py EXPORTED.yaml METRICS.csv --slug allreduce-shootout-h200x2 \
        --name "Allreduce shootout, 2x H200" --measured "2x H200 ..." --out docs/results/...yaml
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.domain.answer import BreakEvenCurve, is_cpu_floor
from app.protocol.metrics import MetricName as M


def rows_of(path: Path) -> list[dict[str, Any]]:
    out = []
    for r in csv.DictReader(open(path)):
        tags = json.loads(r["tags"])
        if is_cpu_floor(tags):
            continue
        out.append(
            {
                "trial": int(r["trial_id"]),
                "approach": r["approach"],
                "name": r["name"],
                "value": float(r["value"]),
                "tags": tags,
            }
        )
    return out


def one(rows: list[dict[str, Any]], name: str, **tags: Any) -> dict[str, Any] | None:
    found = [r for r in rows if r["name"] == name and all(r["tags"].get(k) == v for k, v in tags.items())]
    return found[0] if found else None


def spread(tags: dict[str, Any], unit: str) -> str:
    if "p10_us" in tags:
        return f"p10 {tags['p10_us']:.2f}, p90 {tags['p90_us']:.2f} {unit}, {tags.get('sample_count', tags.get('samples', '?'))} samples"
    if "p10_ms" in tags:
        return f"p10 {tags['p10_ms']:.3f}, p90 {tags['p90_ms']:.3f} {unit}, {tags.get('sample_count', tags.get('samples', '?'))} samples"
    return f"{tags.get('sample_count', tags.get('samples', '?'))} samples"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("campaign_file", type=Path)
    ap.add_argument("metrics_csv", type=Path)
    ap.add_argument("--slug", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--measured", required=True, help="where and when, for every source line")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    doc = yaml.safe_load(args.campaign_file.read_text())
    rows = rows_of(args.metrics_csv)
    camp = doc["campaign"]
    tokens = int(camp.get("verify_tokens") or 4)
    n_ar = int(camp.get("allreduces_per_verify") or 122)
    titles = {a["key"]: a["title"] for a in doc["approaches"]}
    where = args.measured

    decode = min((r for r in rows if r["name"] == M.DECODE_STEP_MS), key=lambda r: r["value"])
    draft = one(rows, M.DRAFT_STEP_MS, mode="graph") or one(rows, M.DRAFT_STEP_MS)
    compute = min(
        (r for r in rows if r["name"] == M.VERIFY_COMPUTE_MS and r["tags"].get("tokens") == tokens),
        key=lambda r: r["value"],
    )
    assert draft is not None, "no draft_step_ms in the metrics"
    t_base = decode["value"]
    camp.update(
        slug=args.slug,
        name=args.name,
        baseline_tok_s=round(1000.0 / t_base, 2),
        draft_step_ms=round(draft["value"], 4),
        verify_compute_ms=round(compute["value"], 4),
    )
    sources = dict(camp.get("input_sources") or {})
    sources.update(
        baseline_tok_s=(
            f"1000 / T_base, T_base = {t_base:.3f} ms: the fastest synthetic plain decode step "
            f"({decode['approach']}, trial #{decode['trial']}, 61 layers, 1 token, {decode['tags'].get('method')}; "
            f"{spread(decode['tags'], 'ms')}), {where}"
        ),
        draft_step_ms=(
            f"EAGLE-3 draft head (one decoder layer + LM head, hidden 7168, vocab 163,840), {draft['approach']}, "
            f"trial #{draft['trial']}, {draft['tags'].get('method')}; {spread(draft['tags'], 'ms')}, {where}"
        ),
        verify_compute_ms=(
            f"the synthetic verify step without its allreduces ({compute['approach']}, trial #{compute['trial']}, "
            f"{tokens} tokens, 61 layers, TP 2), {where}"
        ),
    )
    camp["input_sources"] = sources
    nbytes = tokens * int(camp.get("hidden_size") or 7168) * 2
    reported = []
    for r in rows:
        if r["name"] == M.ALLREDUCE_LATENCY_US and r["tags"].get("tokens") == tokens:
            t = r["tags"]
            env = " ".join(f"{k}={v}" for k, v in sorted((t.get("env") or {}).items()))
            reported.append(
                {
                    "label": f"{titles.get(r['approach'], r['approach'])}, measured",
                    "approach": r["approach"],
                    "t_ar_us": round(r["value"], 3),
                    "bytes": nbytes,
                    "source": (
                        f"trial #{r['trial']}, {t.get('method')} ({t.get('mode')}{', ' + env if env else ''}); "
                        f"{spread(t, 'us')}; {where}"
                    ),
                }
            )
        if r["name"] == M.ALLREDUCE_IN_SITU_US and r["tags"].get("tokens") == tokens:
            reported.append(
                {
                    "label": f"{titles.get(r['approach'], r['approach'])}: allreduce in situ",
                    "approach": r["approach"],
                    "t_ar_us": round(r["value"], 3),
                    "bytes": nbytes,
                    "source": (
                        f"trial #{r['trial']}: (verify step - the same step without allreduces) / {n_ar}; {where}"
                    ),
                }
            )
    camp["reported"] = reported
    args.out.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=110))
    print(f"wrote {args.out}: {len(reported)} reported figures")

    steps = int(camp.get("draft_steps") or 3)
    curve = BreakEvenCurve(t_base, n_ar, steps * draft["value"], compute["value"])
    print(
        f"\nT_base {t_base:.3f} ms ({decode['approach']}), T_draft {steps} x {draft['value']:.3f} ms, "
        f"T_verify_compute {compute['value']:.3f} ms, N_ar {n_ar}\n"
    )
    print("| figure | t_ar (us) | verify comm (ms) | tau* |")
    print("|---|---|---|---|")
    for f in sorted(reported, key=lambda f: f["t_ar_us"]):
        print(
            f"| {f['label']} | {f['t_ar_us']:.2f} | {n_ar * f['t_ar_us'] / 1000:.2f} | {curve.tau_star(f['t_ar_us']):.3f} |"
        )
    print("\nFrom the measured verify steps directly: tau* = (T_draft + T_verify) / T_base")
    print("| approach | T_verify (ms) | tau* |")
    print("|---|---|---|")
    for r in rows:
        if r["name"] == M.VERIFY_TIME_MS and r["tags"].get("tokens") == tokens:
            print(f"| {r['approach']} | {r['value']:.3f} | {(steps * draft['value'] + r['value']) / t_base:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
