"""Search benchmark (issue 45): the 50,000-trial seed of bench/pages_at_scale.py (500 approaches, 150,000 status
changes, ~225,000 log chunks) plus 50 trials whose log holds a rare line ("KeyError: 12"), on SQLite (and
PostgreSQL with --postgres URL). Times the log indexer catching up from nothing (SQLite; PostgreSQL indexes on
insert) and each query's latency (median and max of --repeat runs, each a fresh read transaction).

    .venv/bin/python bench/search.py [--scale 1] [--repeat 7] [--postgres postgresql+psycopg://...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import insert, select  # noqa: E402
from sqlmodel import col  # noqa: E402

from app.db import make_engine, migrate, session_scope  # noqa: E402
from app.domain import search  # noqa: E402
from app.models import LogChunk, Trial  # noqa: E402
from bench.pages_at_scale import build_campaign  # noqa: E402

QUERIES = ["KeyError: 12", "allreduce", "nvshmem hangs", "#{trial}"]


def run(url: str, scale: float, repeat: int) -> None:
    migrate(url)
    engine = make_engine(url)
    t0 = time.perf_counter()
    build_campaign(engine, "scale", approaches=max(1, int(500 * scale)), trials=int(50_000 * scale), runners=True)
    with session_scope(engine) as s:
        ids = [t for (t,) in s.execute(select(col(Trial.id)).order_by(col(Trial.id)).limit(50))]
        s.execute(
            insert(LogChunk),
            [
                {"trial_id": t, "attempt_id": "rare", "seq": 900, "offset": 0, "data": "step 7\nKeyError: 12\n"}
                for t in ids
            ],
        )
        chunks = s.execute(select(col(LogChunk.id)).order_by(col(LogChunk.id).desc()).limit(1)).scalar_one()
    print(f"{engine.dialect.name}: seed built in {time.perf_counter() - t0:.1f} s ({chunks} log chunks)")
    t0 = time.perf_counter()
    batches = 0
    while True:
        with session_scope(engine) as s:
            if not search.index_logs(s):
                break
        batches += 1
    took = time.perf_counter() - t0
    if batches:
        print(f"  log indexer from nothing: {took:.1f} s in {batches} passes ({chunks / took:,.0f} chunks/s)")
    for q in QUERIES:
        q = q.format(trial=ids[0])
        times, hits = [], []
        for _ in range(repeat):
            with session_scope(engine, write=False) as s:
                t0 = time.perf_counter()
                hits = search.search(s, q)
                times.append((time.perf_counter() - t0) * 1000)
        kinds = {k: sum(1 for h in hits if h.kind == k) for k in ("approach", "verdict", "trial", "log")}
        print(
            f"  {q!r:16} {len(hits):3} hits {kinds}: median {statistics.median(times):.1f} ms, max {max(times):.1f} ms"
        )
    engine.dispose()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--postgres", help="Also on this (empty) PostgreSQL database.")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run(f"sqlite:///{tmp}/search.db", args.scale, args.repeat)
    if args.postgres:
        run(args.postgres, args.scale, args.repeat)


if __name__ == "__main__":
    main()
