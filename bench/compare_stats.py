"""The compare page and API at the size of issue 24: 8 trials x 200 metric points x 100 raw samples each
(160,000 samples), with every row's statistics over trials (issue 34: each column is one trial, so each
row's interval uses the runner's run-to-run spread, estimated from --earlier repeats of the approach on
that runner: every pair's interval the known-spread t interval of docs/statistics.md, 1,400 of them).
Prints the server time per request (median of --repeat, in-process ASGI: no network) on two clocks
(wall, and this process's CPU), and the statistics pass alone.

    .venv/bin/python bench/compare_stats.py               # SQLite
    .venv/bin/python bench/compare_stats.py --db postgres
    .venv/bin/python bench/compare_stats.py --no-summary  # rows read from their samples (before migration 0018)
    .venv/bin/python bench/compare_stats.py --parts --repeat 15  # the page's parts, timed in one thread
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from sqlalchemy import insert  # noqa: E402

from app.models import Approach, Campaign, Metric, Runner, Trial, TrialState, utcnow  # noqa: E402
from app.state import app_state  # noqa: E402

FINGERPRINT = {"gpu_count": 8, "sm": "9.0", "torch": "2.10.0", "cuda": "12.8", "nccl": "2.27.3", "driver": "570.124"}


def build(engine, trials: int, points: int, samples: int, earlier: int = 4, summary: bool = True) -> list[int]:
    """The compared trials' ids (the `earlier` repeats come first and are not compared). Each row's samples
    summary is written with them as the log ingest does (statistics.summary_columns); summary=False: rows
    as written before migration 0018 filled them, read from their samples."""
    from app.db import session_scope
    from app.domain import statistics as stats_domain

    rng = np.random.default_rng(0)
    with session_scope(engine) as s:
        campaign = Campaign(slug="bench", name="Compare bench")
        s.add(campaign)
        s.flush()
        assert campaign.id is not None
        approach = Approach(campaign_id=campaign.id, key="a", title="A", position=1, recipe={"kind": "command"})
        runner = Runner(name="node", token_hash="h", connected=False, fingerprint=FINGERPRINT)
        s.add_all([approach, runner])
        s.flush()
        ids = []
        for n in range(earlier + trials):
            trial = Trial(
                campaign_id=campaign.id,
                approach_id=approach.id,  # type: ignore[arg-type]
                state=TrialState.succeeded,
                runner_id=runner.id,
                fingerprint=FINGERPRINT,
                started_at=utcnow(),
                finished_at=utcnow(),
            )
            s.add(trial)
            s.flush()
            ids.append(trial.id)
            rows = []
            for p in range(points):
                center = 10.0 + p * (1 + 0.02 * (n % 3))
                raw = rng.normal(center, center * 0.03, samples)
                rows.append(
                    {
                        "trial_id": trial.id,
                        "approach_id": approach.id,
                        "campaign_id": campaign.id,
                        "seq": 0,
                        "index": p,
                        "name": "allreduce_latency_us",
                        "value": float(np.median(raw)),
                        "unit": "us",
                        "tags": {"tokens": p + 1, "p10_us": float(np.percentile(raw, 10)), "backend": "nccl"},
                        "samples": [float(x) for x in raw],
                        **stats_domain.summary_columns([float(x) for x in raw] if summary else None),
                        "created_at": utcnow(),
                    }
                )
            s.execute(insert(Metric), rows)
    return ids[earlier:]  # type: ignore[return-value]


def measure(
    db_url: str, repeat: int, trials: int, points: int, samples: int, summary: bool = True, parts: bool = False
) -> None:
    from fastapi.testclient import TestClient

    from app.config import Settings
    from app.db import session_scope
    from app.domain import statistics as stats_domain
    from app.domain.logins import create_api_token
    from app.main import create_app

    data_dir = Path(tempfile.mkdtemp(prefix="compare-bench-"))
    app = create_app(
        Settings(data_dir=data_dir, database_url=db_url, embedded_runner=False, secret_key="bench-" + uuid.uuid4().hex)
    )
    engine = app_state(app).engine
    t = time.perf_counter()
    ids = build(engine, trials, points, samples, summary=summary)
    print(
        f"  built {trials} trials (and 4 earlier repeats) x {points} points x {samples} samples"
        f" ({'with' if summary else 'without'} their summaries) in {time.perf_counter() - t:.1f} s"
    )
    with session_scope(engine) as s:
        headers = {"Authorization": f"Bearer {create_api_token(s, 'bench')}"}
    query = "&".join(f"trial={i}" for i in ids)
    rng = np.random.default_rng(1)
    rows = [[[list(rng.normal(10, 0.3, samples))] for _ in range(trials)] for _ in range(points)]
    known = [[stats_domain.KnownSpread(0.02, 3)] * trials for _ in range(points)]
    wall, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        stats_domain.compare_rows(rows, lower_better=[True] * points, known=known)
        wall.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    print(f"  {'what':28} {'median ms':>10} {'max ms':>8} {'cpu ms':>7} {'bytes':>10}")
    print(
        f"  {'statistics pass alone':28} {statistics.median(wall):10.1f} {max(wall):8.1f} {statistics.median(cpu):7.1f}"
    )
    if parts:
        measure_parts(app, headers, f"/campaigns/bench/compare?{query}", repeat)
        engine.dispose()
        return
    with TestClient(app, base_url="http://127.0.0.1", headers=headers) as client:
        for label, path in (
            ("GET /api/.../compare", f"/api/campaigns/bench/compare?{query}"),
            ("compare page", f"/campaigns/bench/compare?{query}"),
        ):
            client.get(path)  # warm: imports, first connection
            wall, cpu, size = [], [], 0
            for _ in range(repeat):
                t, c = time.perf_counter(), time.process_time()
                r = client.get(path)
                wall.append((time.perf_counter() - t) * 1000)
                cpu.append((time.process_time() - c) * 1000)
                assert r.status_code == 200, r.text[:200]
                size = len(r.content)
            print(
                f"  {label:28} {statistics.median(wall):10.1f} {max(wall):8.1f} {statistics.median(cpu):7.1f} {size:10,d}"
            )
    engine.dispose()


PARTS = (  # (module, function): the page's parts --parts times
    ("app.domain.comparison", "_metric_rows"),
    ("app.domain.comparison", "metric_groups"),
    ("app.domain.comparison", "point_tags"),
    ("app.domain.comparison", "run_to_run_spreads"),
    ("app.domain.statistics", "compare_rows"),
    ("app.domain.statistics", "_side_data"),
    ("app.domain.comparison", "with_statistics"),
    ("app.web.compare", "metric_table"),
    ("app.web.compare", "_compare_page"),
    ("app.web.compare", "render"),
)


def measure_parts(app, headers: dict[str, str], path: str, repeat: int) -> None:
    """The page's parts, each the fewest CPU ms over the requests: the request served in this thread (an ASGI
    client, the database work not sent to a worker thread) with a timer around each function of PARTS."""
    import asyncio
    import importlib

    import httpx

    spent: dict[str, list[float]] = {}
    for module_name, name in PARTS:
        module = importlib.import_module(module_name)
        inner = getattr(module, name)

        def timed(*args, _inner=inner, _name=name, **kwargs):
            start = time.process_time()
            try:
                return _inner(*args, **kwargs)
            finally:
                spent.setdefault(_name, []).append(time.process_time() - start)

        setattr(module, name, timed)

    async def inline(fn, *args, **kwargs):
        return fn(*args, **kwargs)

    asyncio.to_thread = inline  # type: ignore[assignment]

    async def run() -> list[float]:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", headers=headers) as client:
                for _ in range(2):
                    assert (await client.get(path)).status_code == 200
                spent.clear()
                totals = []
                for _ in range(repeat):
                    start = time.process_time()
                    await client.get(path)
                    totals.append(time.process_time() - start)
                return totals

    totals = asyncio.run(run())
    print(f"  compare page in one thread, the fewest CPU ms of {repeat}: request {min(totals) * 1000:.1f}")
    for _, name in PARTS:
        print(f"    {name:22} {min(spent.get(name, [0.0])) * 1000:7.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--points", type=int, default=200)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument(
        "--no-summary", action="store_true", help="rows without their stored sample summary (read from the samples)"
    )
    parser.add_argument("--parts", action="store_true", help="the compare page's parts, timed in one thread")
    args = parser.parse_args()
    print(f"compare bench; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    if args.db == "sqlite":
        url = f"sqlite:///{tempfile.mkdtemp(prefix='compare-bench-')}/bench.db"
        measure(url, args.repeat, args.trials, args.points, args.samples, not args.no_summary, args.parts)
        return
    import psycopg

    admin = os.environ.get("CAMPAIGN_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
    name = "compare_bench_" + uuid.uuid4().hex[:8]
    conninfo = admin.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        measure(
            admin.rsplit("/", 1)[0] + "/" + name,
            args.repeat,
            args.trials,
            args.points,
            args.samples,
            not args.no_summary,
            args.parts,
        )
    finally:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
