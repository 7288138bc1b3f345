"""The kernel tables of a board's profiled trials, from its data directory (the SQLite database and the artifact
store): per trial with a trace artifact, N_ar, t_ar and the top kernels, as markdown (docs/results.md) and JSON.

    python bench/kernel_tables.py --data-dir DIR [--top 12] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlmodel import col, select  # noqa: E402

from app.db import make_engine, session_scope  # noqa: E402
from app.domain import artifacts  # noqa: E402
from app.domain.traces import read_trace  # noqa: E402
from app.models import Approach, Artifact, Trial  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    dbs = sorted(args.data_dir.glob("*.db"))
    if not dbs:
        sys.exit(f"no SQLite database in {args.data_dir}")
    store = artifacts.store_for(args.data_dir)
    engine = make_engine(f"sqlite:///{dbs[0]}")
    out: list[dict[str, Any]] = []
    with session_scope(engine, write=False) as session:
        rows = session.exec(
            select(Artifact, Trial, Approach)
            .join(Trial, col(Trial.id) == col(Artifact.trial_id))
            .join(Approach, col(Approach.id) == col(Trial.approach_id))
            .order_by(col(Artifact.trial_id))
        ).all()
        for artifact, trial, approach in rows:
            if not artifacts.is_trace_name(artifact.name) or artifact.removed_at is not None:
                continue
            summary = read_trace(store.path(artifact.sha256))
            table = summary.table()
            out.append({"trial": trial.id, "approach": approach.key, "artifact": artifact.name, "steps": summary.steps,
                        "step_us": summary.step_us / max(1, summary.steps), "n_ar": summary.allreduces_per_step,
                        "t_ar_us": summary.allreduce_us, "kernels": len(table), "top": table[: args.top]})  # fmt: skip
    for t in out:
        print(f"\n### Trial #{t['trial']} {t['approach']} ({t['artifact']}): {t['steps']} steps, "
              f"{t['step_us'] / 1000:.2f} ms a step (host span), {t['kernels']} distinct kernels; "
              f"N_ar {t['n_ar']}, t_ar {t['t_ar_us']}\n")  # fmt: skip
        print("| kernel | kind | calls per step | total per step (us) | mean (us) | share |")
        print("|---|---|---|---|---|---|")
        for k in t["top"]:
            name = k["name"] if len(k["name"]) <= 70 else k["name"][:67] + "..."
            print(f"| `{name}` | {k['kind']} | {k['calls'] / t['steps']:.0f} | {k['total_us'] / t['steps']:.1f} | "
                  f"{k['mean_us']:.2f} | {100 * k['share']:.1f}% |")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0 if out else 1


if __name__ == "__main__":
    sys.exit(main())
