"""The trials page (/trials, issue 45) and `GET /api/trials` at the benchmarks' size: the campaign
`bench/pages_at_scale.py` builds (500 approaches, 50,000 trials, ~519,000 metrics, 225,000 log chunks), plus a
second campaign of 5,000 trials (the page across campaigns reads both), on SQLite and PostgreSQL. Prints the
server time per view (in-process ASGI, no network: median, min and max of --repeat requests after one warm-up)
and the SQL statements it ran. The target: under 150 ms at full size.

    .venv/bin/python bench/trials_page_at_scale.py                # full size, SQLite and PostgreSQL
    .venv/bin/python bench/trials_page_at_scale.py --scale 0.1 --db sqlite
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import func, select  # noqa: E402

from app.models import Trial, utcnow  # noqa: E402
from app.services import changes as change_points  # noqa: E402
from app.state import app_state  # noqa: E402
from bench.pages_at_scale import (  # noqa: E402
    StatementCounter,
    _no_change_point_pass,
    build_campaign,
    scratch_postgres,
)

TARGET_MS = 150.0


def views(scale: float) -> list[tuple[str, str]]:
    # build_campaign's trials start 30 days ago, one every 30 s: the week after its first day.
    week_from = (utcnow() - timedelta(days=29)).date().isoformat()
    week_to = (utcnow() - timedelta(days=22)).date().isoformat()
    deep = max(1, int(50_000 * scale) // 50 // 2)
    middle = f"a{max(1, int(500 * scale) // 2):04d}"
    return [
        ("campaign, newest first", "/trials?campaign=scale"),
        (f"campaign, page {deep}", f"/trials?campaign=scale&page={deep}"),
        ("campaign, sort by runner", "/trials?campaign=scale&sort=runner"),
        ("campaign, sort -finished", "/trials?campaign=scale&sort=-finished"),
        ("campaign, sort approach", "/trials?campaign=scale&sort=approach"),
        ("state=failed", "/trials?campaign=scale&state=failed"),
        ("one approach", f"/trials?campaign=scale&approach={middle}"),
        ("runner + sort state", "/trials?campaign=scale&runner=node-a&sort=state"),
        ("a week (since/until)", f"/trials?campaign=scale&since={week_from}&until={week_to}"),
        ("started by", "/trials?campaign=scale&requested_by=bench"),
        ("proposal=none", "/trials?campaign=scale&proposal=none"),
        ("tag tokens=64", "/trials?campaign=scale&tag=tokens%3D64"),
        ("all campaigns", "/trials"),
        ("all campaigns, state+sort", "/trials?state=succeeded&sort=-campaign"),
        ("API, campaign", "/api/trials?campaign=scale"),
        ("API, filtered + sorted", "/api/trials?campaign=scale&state=failed&sort=runner&page=3"),
    ]


def measure(db_url: str, scale: float, repeat: int, only: list[str]) -> None:
    from fastapi.testclient import TestClient

    from app.config import Settings
    from app.db import session_scope
    from app.domain.logins import create_api_token
    from app.main import create_app

    app = create_app(
        Settings(
            data_dir=Path(tempfile.mkdtemp(prefix="trials-at-scale-")),
            database_url=db_url,
            embedded_runner=False,
            secret_key="bench-" + uuid.uuid4().hex,
        )
    )
    engine = app_state(app).engine
    t = time.perf_counter()
    build_campaign(engine, approaches=max(2, int(500 * scale)), trials=max(4, int(50_000 * scale)))
    build_campaign(engine, "other", approaches=max(2, int(50 * scale)), trials=max(4, int(5_000 * scale)), seed=2)
    with session_scope(engine, write=False) as session:
        trials = session.execute(select(func.count()).select_from(Trial)).scalar()
    print(f"  built in {time.perf_counter() - t:.1f} s: {trials:,} trials in 2 campaigns")
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE")  # what autovacuum does soon after such a load
    with session_scope(engine) as session:
        headers = {"Authorization": f"Bearer {create_api_token(session, 'bench')}"}
    counter = StatementCounter(engine)
    # The change-point pass would start on the freshly loaded trials in this process and take the GIL from the
    # timed requests (a running board did that work as the trials arrived): left out, as pages_at_scale does.
    change_points.run = _no_change_point_pass
    with TestClient(app, base_url="http://127.0.0.1", headers=headers) as client:
        print(
            f"  {'view':30} {'median ms':>9} {'min':>7} {'max':>7} {'queries':>8} {'trials':>8}  target {TARGET_MS:.0f} ms"
        )
        for label, path in views(scale):
            if only and not any(o in label for o in only):
                continue
            r = client.get(path)  # warm-up (and the check that it answers)
            if r.status_code != 200:
                print(f"  {label:30} HTTP {r.status_code}: {r.text[:160]}")
                continue
            found = r.json()["total"] if path.startswith("/api/") else _total(r.text)
            times = []
            for _ in range(repeat):
                before = counter.count
                t = time.perf_counter()
                client.get(path)
                times.append((time.perf_counter() - t) * 1000)
                queries = counter.count - before
            median = statistics.median(times)
            print(
                f"  {label:30} {median:9.1f} {min(times):7.1f} {max(times):7.1f} {queries:8d} {found:8,d}  "
                + ("ok" if median < TARGET_MS else "OVER")
            )
        if only and not any(o in "export CSV" for o in only):
            return
        t = time.perf_counter()
        r = client.get("/api/trials/export?campaign=scale&format=csv")
        print(
            f"  {'export CSV (whole campaign)':30} {(time.perf_counter() - t) * 1000:9.1f} ms, {len(r.content):,} bytes"
        )
    engine.dispose()


def _total(html: str) -> int:
    start = html.index('id="trial-total">') + len('id="trial-total">')
    return int(html[start : html.index("<", start)].replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the full size (1.0: 50,000 trials)")
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--repeat", type=int, default=7, help="timed requests per view (after one warm-up)")
    parser.add_argument("--only", action="append", default=[], help="only views whose label contains this")
    args = parser.parse_args()
    print(f"trials page at scale x{args.scale}; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    if args.db in ("sqlite", "both"):
        print("SQLite")
        measure(f"sqlite:///{tempfile.mkdtemp(prefix='trials-at-scale-')}/scale.db", args.scale, args.repeat, args.only)
    if args.db in ("postgres", "both"):
        with scratch_postgres("trials_at_scale") as url:
            print("PostgreSQL")
            measure(url, args.scale, args.repeat, args.only)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
