"""Turn bench/moe_gpu_session.sh's trial logs (one folder per run, each `<approach>.log` plus node.txt) into a
results campaign: one approach per trial name, each run's log one ended trial with the metric lines it printed
(parsed by the board's own parser), its recipe (the argv, validated by build_launch) and the node's stack. The
file imports with `campaign import` and its trials are on the board as measured ones. `--tables` prints the
docs/results.md tables: each figure the mean of the trials' medians with a 95% hierarchical-bootstrap interval
over trials, then samples within each (app.domain.statistics.trial_resamples).

    python bench/moe_results.py RUN1_DIR RUN2_DIR --out docs/results/moe-sweep-h200x1.yaml [--tables]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.domain.statistics import percentile_interval, trial_estimate, trial_resamples
from app.protocol.metrics import ConditionTag as C
from app.protocol.metrics import MetricName as M
from app.protocol.metrics import parse_metric_line
from runners.recipes import build_launch

LIST_PARAMS = {"batches", "draft_tokens"}
TITLES = {
    "smoke-moe-bf16": "MoE stand-in smoke, bf16 experts (check + batch 1, k 0 and 3)",
    "smoke-moe-fp8": "MoE stand-in smoke, fp8 experts (check + batch 1)",
    "smoke-moe-int4": "MoE stand-in smoke, int4 experts (check + batch 1)",
    "smoke-moe-dsv3": "MoE stand-in smoke, DeepSeek-V3 geometry, bf16 experts",
    "moe-int4-ctx1024": "MoE verify/decode sweep, int4 experts (group 32), context 1,024",
    "moe-int4-ctx4096": "MoE verify/decode sweep, int4 experts (group 32), context 4,096",
    "moe-bf16-ctx1024": "MoE verify/decode sweep, bf16 experts, context 1,024",
    "moe-fp8-ctx1024": "MoE verify/decode sweep, fp8 experts, context 1,024",
    "moe-bf16-ctx4096": "MoE verify/decode sweep, bf16 experts, context 4,096",
    "moe-fp8-ctx4096": "MoE verify/decode sweep, fp8 experts, context 4,096",
    "draft-v32000": "EAGLE-3 draft step, TP 1, draft vocabulary 32,000",
    "draft-v163840": "EAGLE-3 draft step, TP 1, draft vocabulary 163,840",
}


def recipe_of(argv: str) -> dict[str, Any]:
    words = argv.split()
    module, flags = words[0], words[1:]
    params: dict[str, Any] = {}
    for flag, value in zip(flags[::2], flags[1::2]):
        name = flag.lstrip("-").replace("-", "_")
        params[name] = [int(v) for v in value.split(",")] if name in LIST_PARAMS else value
    kind = module.rsplit(".", 1)[1]
    recipe = {"kind": kind, "params": params, "timeout_s": 200}
    build_launch(recipe)  # the recipe the trial ran is one the board accepts
    return recipe


def fingerprint(node: str) -> dict[str, Any]:
    name, driver, mem = node.splitlines()[1].split(", ")
    m = re.search(r"python (\S+) torch (\S+) cuda (\S+) nccl (\S+) sm \((\d+), (\d+)\)", node)
    assert m, node
    sm = f"{m.group(5)}.{m.group(6)}"
    return {
        "hostname": "vm",
        "cpu_count": 16,
        "python": m.group(1),
        "gpu_count": 1,
        "gpus": [{"name": name, "sm": sm, "memory_mib": int(mem.split()[0])}],
        "sm": sm,
        "driver": driver,
        "cuda": m.group(3),
        "torch": m.group(2),
        "nccl": m.group(4),
        "sglang": None,
        "flashinfer": None,
    }


# Tags the campaign file leaves out of each row (the raw logs keep them): constant over a trial and said once
# elsewhere (copy_bandwidth_gbps is its own metric; layer_scaling is layers / layers_timed / moe_layers_timed).
DROPPED_TAGS = ("layer_scaling", "copy_bandwidth_gbps", "torch", "nccl")  # torch, nccl: in the fingerprint


def trial_of(log: Path, fp: dict[str, Any], run: int) -> dict[str, Any]:
    """One trial from its log. To keep the file under the import limit, each point's step_bw_efficiency line
    becomes the tag `bw_efficiency` of its step_floor_ms row (the same value), and DROPPED_TAGS are left out."""
    text = log.read_text()
    head = dict(re.findall(r"^# (\w+): (.*)$", text, re.M))
    metrics = []
    efficiency: dict[tuple, float] = {}
    for line in text.splitlines():
        found = parse_metric_line(line)
        if found and found["name"] == M.STEP_BW_EFFICIENCY:
            efficiency[(found["tags"].get("batch"), found["tags"].get("draft_tokens"))] = found["value"]
    for seq, line in enumerate(text.splitlines()):
        found = parse_metric_line(line)
        if not found or found["name"] == M.STEP_BW_EFFICIENCY:
            continue
        tags = {k: v for k, v in found["tags"].items() if k not in DROPPED_TAGS}
        if tags.get("experts_touched_rank") == tags.get(C.EXPERTS_TOUCHED):
            tags.pop("experts_touched_rank", None)  # one rank holds every expert
        if found["name"] == M.STEP_FLOOR_MS:
            tags["bw_efficiency"] = efficiency[(tags.get("batch"), tags.get("draft_tokens"))]
        found["tags"] = {**tags, "run": run}
        metrics.append({**found, "seq": seq, "index": 0, "at": head["finished"] + "+00:00"})  # logs carry no line times
    code = int(head["exit_code"])
    return {
        "approach": log.stem,
        "state": "succeeded" if code == 0 else "failed",
        "recipe": recipe_of(head["argv"]),
        "fingerprint": fp,
        "exit_code": code,
        "requested_by": "bench/moe_gpu_session.sh",
        "gpu_released": True,
        "created_at": head["started"] + "+00:00",
        "started_at": head["started"] + "+00:00",
        "finished_at": head["finished"] + "+00:00",
        "metrics": metrics,
    }


def build(runs: list[Path], slug: str) -> dict[str, Any]:
    results = []
    for run, folder in enumerate(runs, 1):
        fp = fingerprint((folder / "node.txt").read_text())
        # smoke trials (5 samples each, the checks) stay in the raw logs: the campaign holds the sweeps
        results += [trial_of(log, fp, run) for log in sorted(folder.glob("*.log")) if not log.stem.startswith("smoke-")]
    keys = list(dict.fromkeys(r["approach"] for r in results))
    approaches = []
    for key in keys:
        first = next(r for r in results if r["approach"] == key)
        ok = [r for r in results if r["approach"] == key and r["state"] == "succeeded"]
        approaches.append(
            {
                "key": key,
                "title": TITLES.get(key, key),
                "status": "promising" if ok else "dead end",
                "evidence": f"{len(ok)} trial(s) on 1x {first['fingerprint']['gpus'][0]['name']} (bench/moe_gpu_session.sh); see docs/results.md.",
                "effort": "none",
                "recipe": first["recipe"],
                "requirements": {"gpus": 1, "software": ["torch"]},
            }
        )
    return {
        "format": "campaign-board/v1",
        "campaign": {
            "slug": slug,
            "name": "MoE stand-in (faithful): decode, verify and draft by batch and draft length, 1x H200",
            "description": (
                "On one H200 (TP 1, no allreduce): the MoE stand-in (runners/recipes/moe_step.py, issue 44: "
                "balanced routing, one grouped kernel per matrix over the routed experts) at the Kimi-K2.5 "
                "geometry, layer 0 dense and 2 distinct MoE layers timed, scaled to 61 layers; batch 1-128 x "
                "draft tokens 0-7, contexts 1,024 and 4,096, int4 (group 32, as Kimi-K2.5 ships: the deployed "
                "precision), bf16 and fp8 experts; the EAGLE-3 draft step at draft vocabularies 32,000 and "
                "163,840. Two runs, each trial its own process."
            ),
            "baseline_tok_s": None,
            "accept_length": None,
            "draft_steps": 3,
            "draft_step_ms": None,
            "verify_compute_ms": None,
            "allreduces_per_verify": 122,
            "hidden_size": 7168,
            "verify_tokens": 4,
            "input_sources": {"draft_steps": "SGLang's default for the DeepSeek-V3 family (--speculative-num-steps 3)"},
            "answer_conditions": {"experts_dtype": "int4"},  # the deployed precision: the default answer's
        },
        "approaches": approaches,
        "results": results,
    }


def _interval(trials: list[list[float]]) -> tuple[float, float, float]:
    est = trial_estimate(trials)
    assert est is not None
    draws = trial_resamples(trials, 2000, np.random.default_rng(0))
    assert draws is not None
    lo, hi = percentile_interval(draws, 0.95)
    return est.value, lo, hi


def tables(doc: dict[str, Any]) -> None:
    by: dict[tuple, list[list[float]]] = defaultdict(list)
    tags: dict[tuple, dict[str, Any]] = {}
    floors: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in doc["results"]:
        for m in r["metrics"]:
            t = m["tags"]
            key = (r["approach"], m["name"], t.get("batch"), t.get("draft_tokens"))
            if m.get("samples"):
                by[key].append(m["samples"])
            else:
                by[key].append([m["value"]])
            tags[key] = t
            if m["name"] == M.STEP_FLOOR_MS:
                floors[(r["approach"], t.get("batch"), t.get("draft_tokens"))].append(t)
    sweeps = [a for a in TITLES if a.startswith("moe-") and any(r["approach"] == a for r in doc["results"])]
    for approach in sweeps:
        print(f"\n#### {TITLES[approach]}: verify step, ms (k = 0 is the decode step T_base(b))\n")
        print("| batch | " + " | ".join(f"k={k}" for k in range(8)) + " |")
        print("|---|" + "---|" * 8)
        for b in (1, 2, 4, 8, 16, 32, 64, 128):
            cells = []
            for k in range(8):
                v, lo, hi = _interval(by[(approach, M.VERIFY_TIME_MS, b, k)])
                cells.append(f"{v:.1f} ({lo:.1f}-{hi:.1f})")
            print(f"| {b} | " + " | ".join(cells) + " |")
        print("\nexperts touched per MoE layer (of 384) / bandwidth efficiency (floor / step):\n")
        print("| batch | " + " | ".join(f"k={k}" for k in range(8)) + " |")
        print("|---|" + "---|" * 8)
        for b in (1, 2, 4, 8, 16, 32, 64, 128):
            cells = []
            for k in range(8):
                touched = tags[(approach, M.VERIFY_TIME_MS, b, k)][C.EXPERTS_TOUCHED]
                eff = np.mean([t["bw_efficiency"] for t in floors[(approach, b, k)]])
                cells.append(f"{touched:g} / {eff:.0%}")
            print(f"| {b} | " + " | ".join(cells) + " |")
    print("\n#### Draft step, ms (TP 1, graph)\n")
    print("| batch | draft vocab 32,000 | draft vocab 163,840 |")
    print("|---|---|---|")
    for b in (1, 2, 4, 8, 16, 32, 64, 128):
        cells = []
        for a in ("draft-v32000", "draft-v163840"):
            v, lo, hi = _interval(by[(a, M.DRAFT_STEP_MS, b, None)])
            cells.append(f"{v:.3f} ({lo:.3f}-{hi:.3f})")
        print(f"| {b} | " + " | ".join(cells) + " |")
    for approach in (a for a in sweeps if a.endswith("ctx1024")):
        edt = approach.split("-")[1]
        print(
            f"\n#### tau* = (k x T_draft(b) + T_verify(b, k)) / T_base(b), {edt} experts, context 1,024, "
            "draft vocab 32,000\n"
        )
        print("| batch | " + " | ".join(f"k={k}" for k in range(1, 8)) + " |")
        print("|---|" + "---|" * 7)
        for b in (1, 2, 4, 8, 16, 32, 64, 128):
            base = _interval(by[(approach, M.VERIFY_TIME_MS, b, 0)])[0]
            draft = _interval(by[("draft-v32000", M.DRAFT_STEP_MS, b, None)])[0]
            cells = [
                f"{(k * draft + _interval(by[(approach, M.VERIFY_TIME_MS, b, k)])[0]) / base:.2f}" for k in range(1, 8)
            ]
            print(f"| {b} | " + " | ".join(cells) + " |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="+", help="one folder of logs per run, oldest first")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tables", action="store_true")
    ap.add_argument("--slug", default="moe-faithful-h200x1")
    args = ap.parse_args()
    doc = build(args.runs, args.slug)
    # leaf lists and mappings inline (samples, tags): the file stays under the import limit (2 MiB)
    args.out.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=110, default_flow_style=None))
    print(f"wrote {args.out}: {len(doc['results'])} trials, {sum(len(r['metrics']) for r in doc['results'])} metrics")
    if args.tables:
        tables(doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
