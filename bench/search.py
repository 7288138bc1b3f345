"""Search benchmark (issue 45) on the seed the other benchmarks use: bench/pages_at_scale.py's campaign (500
approaches, 50,000 trials, 150,000 status changes, ~225,000 log chunks, ~519,000 metrics) plus 50 log chunks
holding a rare line ("KeyError: 12"), on SQLite and PostgreSQL. Prints:

- the index built from nothing: SQLite, the log indexer (`search.index_logs`) catching up on every stored chunk
  in its passes (their work only, not the service's pauses); PostgreSQL, a REINDEX of the log chunks' GIN index
  (it is kept on insert: its cost is in the seed's insert time, printed too);
- each query's latency (a word of a reason, a log line, a trial id, a common log word, a phrase with no match):
  median and p90 of --repeat runs, each a fresh read transaction;
- the lag: the board running (its lifespan, so the real indexer service), a chunk holding a fresh word is
  committed, then searched for every 10 ms until found: median, p90 and max over --lag chunks, started at
  random moments of the indexer's poll.

    .venv/bin/python bench/search.py [--scale 1] [--db sqlite|postgres|both] [--repeat 11] [--lag 20]

--scale defaults to $BENCH_SCALE (else 1). The log pipeline with the indexer on and off:
bench/log_pipeline.py --search-index on|off.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import func, insert, select  # noqa: E402
from sqlmodel import col  # noqa: E402

from app.db import session_scope  # noqa: E402
from app.domain import search  # noqa: E402
from app.models import LogChunk, Trial, utcnow  # noqa: E402
from app.services import changes as change_points  # noqa: E402
from app.state import app_state  # noqa: E402
from bench.pages_at_scale import _no_change_point_pass, build_campaign, scratch_postgres  # noqa: E402

QUERIES = [
    ("a word of a reason", "torch"),
    ("a log line", "KeyError: 12"),
    ("a trial id", "#{trial}"),
    ("a common log word", "allreduce"),
    ("a phrase with no match", "quantum zebra entanglement"),
]


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def measure(url: str, scale: float, repeat: int, lag_probes: int) -> None:
    from fastapi.testclient import TestClient

    from app.config import Settings
    from app.main import create_app

    app = create_app(
        Settings(
            data_dir=Path(tempfile.mkdtemp(prefix="search-bench-")),
            database_url=url,
            embedded_runner=False,
            secret_key="bench-" + uuid.uuid4().hex,
        )
    )
    engine = app_state(app).engine
    dialect = engine.dialect.name
    t0 = time.perf_counter()
    build_campaign(engine, "scale", approaches=max(2, int(500 * scale)), trials=max(4, int(50_000 * scale)))
    now = utcnow()
    with session_scope(engine) as s:
        ids = [t for (t,) in s.execute(select(col(Trial.id)).order_by(col(Trial.id)).limit(50))]
        s.execute(
            insert(LogChunk),
            [
                {
                    "trial_id": t,
                    "attempt_id": "rare",
                    "seq": 900,
                    "offset": 0,
                    "data": "step 7\nKeyError: 12\n",
                    "created_at": now,
                }
                for t in ids
            ],
        )
    with session_scope(engine, write=False) as s:
        chunks = s.execute(select(func.count()).select_from(LogChunk)).scalar_one()
        trials = s.execute(select(func.count()).select_from(Trial)).scalar_one()
    print(f"  seed built in {time.perf_counter() - t0:.1f} s: {trials:,} trials, {chunks:,} log chunks")

    if dialect == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE")
            t0 = time.perf_counter()
            conn.exec_driver_sql("REINDEX INDEX ix_search_log_chunk")
            took = time.perf_counter() - t0
            size = conn.exec_driver_sql("SELECT pg_relation_size('ix_search_log_chunk')").scalar_one()
        print(
            f"  log index (GIN) built from nothing: {took:.1f} s ({chunks / took:,.0f} chunks/s), {size / 2**20:.0f} MiB"
        )
    else:
        t0 = time.perf_counter()
        passes = 0
        while True:
            with session_scope(engine) as s:
                if not search.index_logs(s):
                    break
            passes += 1
        took = time.perf_counter() - t0
        print(
            f"  log index (FTS5) from nothing: {took:.1f} s in {passes} passes of at most {search.INDEX_BATCH} chunks "
            f"/ {search.INDEX_BYTES >> 10} KiB ({chunks / took:,.0f} chunks/s of indexing work)"
        )

    print(f"  {'query':24} {'text':30} {'hits':>5} {'median ms':>10} {'p90':>8} {'max':>8}  kinds")
    for label, q in QUERIES:
        q = q.format(trial=ids[len(ids) // 2])
        times: list[float] = []
        hits: list[search.Hit] = []
        for _ in range(repeat + 1):  # the first one warms the caches and is not counted
            with session_scope(engine, write=False) as s:
                t0 = time.perf_counter()
                hits = search.search(s, q)
                times.append((time.perf_counter() - t0) * 1000)
        times = times[1:]
        kinds = {k: n for k in ("approach", "verdict", "trial", "log") if (n := sum(h.kind == k for h in hits))}
        print(
            f"  {label:24} {q!r:30} {len(hits):5} {statistics.median(times):10.1f} {pct(times, 90):8.1f} "
            f"{max(times):8.1f}  {kinds}"
        )

    # The lag, with the board's own indexer (its lifespan) running.
    change_points.run = _no_change_point_pass  # as pages_at_scale: the pass would take the GIL from the probes
    rng = random.Random(7)
    lags: list[float] = []
    polls: list[float] = []
    with TestClient(app, base_url="http://127.0.0.1"):
        time.sleep(2.0)  # the indexer's first pass
        for n in range(lag_probes):
            time.sleep(rng.uniform(0.2, 1.2))
            word = f"lagprobe{n}x{uuid.uuid4().hex[:6]}"
            with session_scope(engine) as s:
                s.execute(
                    insert(LogChunk),
                    [
                        {
                            "trial_id": ids[n % len(ids)],
                            "attempt_id": "lag",
                            "seq": 1000 + n,
                            "offset": 0,
                            "data": f"step {n}\nprobe {word} here\n",
                            "created_at": utcnow(),
                        }
                    ],
                )
            stored = time.perf_counter()
            while True:
                with session_scope(engine, write=False) as s:
                    p0 = time.perf_counter()
                    found = search.search(s, word)
                    polls.append((time.perf_counter() - p0) * 1000)
                if found:
                    break
                if time.perf_counter() - stored > 60:
                    raise SystemExit(f"  a chunk was not searchable 60 s after its commit ({word})")
                time.sleep(0.01)
            lags.append((time.perf_counter() - stored) * 1000)
        with session_scope(engine, write=False) as s:
            backlog = search.log_backlog(s)
    print(
        f"  lag, commit -> searchable ({lag_probes} chunks, board running): median {statistics.median(lags):.0f} ms, "
        f"p90 {pct(lags, 90):.0f} ms, max {max(lags):.0f} ms (a unique-word search: median "
        f"{statistics.median(polls):.1f} ms); backlog after {backlog}"
    )
    engine.dispose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=float(os.environ.get("BENCH_SCALE", "1")))
    ap.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    ap.add_argument("--repeat", type=int, default=11, help="timed runs of each query (after one warm-up)")
    ap.add_argument("--lag", type=int, default=20, help="chunks whose commit -> searchable lag is timed")
    args = ap.parse_args()
    print(
        f"search at scale x{args.scale}; load average {open('/proc/loadavg').read().strip()} on {os.cpu_count()} CPUs"
    )
    if args.db in ("sqlite", "both"):
        print("SQLite")
        measure(f"sqlite:///{tempfile.mkdtemp(prefix='search-bench-')}/search.db", args.scale, args.repeat, args.lag)
    if args.db in ("postgres", "both"):
        with scratch_postgres("search_bench") as url:
            print("PostgreSQL")
            measure(url, args.scale, args.repeat, args.lag)
    print(f"load average after: {open('/proc/loadavg').read().strip()}")


if __name__ == "__main__":
    main()
