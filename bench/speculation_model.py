"""The model over (batch, draft tokens) alone, on synthetic inputs: no database, numpy and scipy only, so it
also runs on a bare machine (the GPU node's python). 20 approaches x 8 batches x 7 draft tokens, each
verify, decode, draft and allreduce figure with R samples (tests/support/speculation.py's physics), per-
position acceptance rates for tau(k). Prints the process CPU and wall time per answer (median of --repeat).

    python bench/speculation_model.py [--approaches 20] [--samples 10] [--resamples 400] [--repeat 9] [--database]

Inputs carry one trial each (the within-run case) unless --trials N gives each figure N trials. --database
also times `read_answer` fresh (its cache cleared) on a SQLite file holding the same campaign
(tests/support/speculation.py's builder): the loader's query, the pairing by conditions and the grid.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.domain.answer.grid import ApproachInputs, SpeculationInputs, accept_length_from_alphas
from app.domain.answer.speculation import speculation_answer
from app.domain.answer.values import Value, exact, measured, of_trials

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
DRAFT_TOKENS = (1, 2, 3, 4, 5, 6, 7)
ALPHAS = (0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2)
HIDDEN = 7168


def build(approaches: int, r: int, seed: int = 1, trials: int = 1) -> SpeculationInputs:
    rng = np.random.default_rng(seed)

    def point(value: float) -> Value:
        if trials == 1:
            return measured(value, [float(x) for x in rng.normal(value, value * 0.02, r)], "synthetic")
        runs = [list(rng.normal(value * rng.normal(1, 0.02), value * 0.002, r)) for _ in range(trials)]
        return of_trials(runs, "synthetic", list(range(trials)))

    draft = {b: point(0.5 + 0.005 * b) for b in BATCHES}
    rows = []
    for i in range(approaches):
        latency, per_us = 6.0 + 12.0 * i / max(approaches - 1, 1), 1.0e5 + 3e3 * i
        sizes = [t * HIDDEN * 2 for t in (1, 4, 16, 64, 256, 1024)]
        rows.append(
            ApproachInputs(
                approach_id=i,
                key=f"allreduce-{i:02d}",
                title=f"allreduce variant {i}",
                status="promising",
                t_base={b: point(10.0 + 0.1 * b) for b in BATCHES},
                draft_step=draft,
                verify_compute={(b, k): point(10.0 + 0.1 * b * (k + 1)) for b in BATCHES for k in DRAFT_TOKENS},
                curve=[(n, point(latency + n / per_us)) for n in sizes],
                curve_how="graph",
                world_size=2,
            )
        )
    return SpeculationInputs(
        batches=BATCHES,
        draft_tokens=DRAFT_TOKENS,
        n_ar=122,
        hidden_size=HIDDEN,
        tau={k: exact(accept_length_from_alphas(ALPHAS, k), "alphas") for k in DRAFT_TOKENS},
        approaches=tuple(rows),
        bytes_per_element=2,
        draft_steps=3,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--approaches", type=int, default=20)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--resamples", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--database", action="store_true")
    args = parser.parse_args()
    spec = build(args.approaches, args.samples, trials=args.trials)
    speculation_answer(spec, resamples=args.resamples)  # warm-up (imports, first allocations)
    walls, cpus = [], []
    for _ in range(args.repeat):
        t, cpu = time.perf_counter(), time.process_time()
        found = speculation_answer(spec, resamples=args.resamples)
        walls.append((time.perf_counter() - t) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
    cells = sum(len(a.cells) for a in found.approaches)
    print(
        f"{args.approaches} approaches, {cells} cells, {args.samples} samples each, {args.resamples} resamples: "
        f"wall {statistics.median(walls):.1f} ms (min {min(walls):.1f}), CPU {statistics.median(cpus):.1f} ms "
        f"(min {min(cpus):.1f}); "
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; numpy {np.__version__}, "
        f"scipy {__import__('scipy').__version__}, Python {sys.version.split()[0]}"
    )
    print(found.sentence)
    if args.database:
        database(args.approaches, args.samples, args.repeat)


def database(approaches: int, r: int, repeat: int) -> None:
    """read_answer fresh on a SQLite file: the same grid, read from metric rows."""
    import tempfile

    from sqlmodel import SQLModel, create_engine

    from app.db import session_scope
    from app.domain.answer import read as answer_read
    from tests.support.speculation import build_sweep_campaign, many_allreduces

    with tempfile.TemporaryDirectory() as tmp:
        engine = create_engine(f"sqlite:///{tmp}/bench.db")
        SQLModel.metadata.create_all(engine)
        with session_scope(engine) as session:
            campaign = build_sweep_campaign(session, r=r, approaches=many_allreduces(approaches)).campaign
            slug = campaign.slug
        walls, cpus = [], []
        with session_scope(engine, write=False) as session:
            from app.domain import campaigns

            campaign = campaigns.get_campaign(session, slug)
            answer_read.read_answer(session, campaign)
            for _ in range(repeat):
                answer_read._CACHE.clear()
                t, cpu = time.perf_counter(), time.process_time()
                found = answer_read.read_answer(session, campaign)
                walls.append((time.perf_counter() - t) * 1000)
                cpus.append((time.process_time() - cpu) * 1000)
        cells = sum(len(a.cells) for a in found.speculation.approaches)
        print(
            f"read_answer fresh on SQLite ({len(found.speculation.approaches)} approaches, {cells} cells, the batch-1 "
            f"report included): wall {statistics.median(walls):.1f} ms (min {min(walls):.1f}), "
            f"CPU {statistics.median(cpus):.1f} ms"
        )


if __name__ == "__main__":
    main()
