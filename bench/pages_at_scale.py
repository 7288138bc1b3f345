"""Every page at the size of a real campaign: builds 500 approaches / 50,000 trials / 150,000 status
changes / 225,000 log chunks / ~519,000 metrics with bulk inserts through the SQLModel tables, on
SQLite and PostgreSQL, then prints the server time per page (median of --repeat requests, in-process
ASGI: no network) and the number of SQL statements each one ran. The campaign YAML, the metrics CSV and one
trial's log (--log-mib of it added first) are read through real uvicorn as streams, with the server's peak memory
growth.

    .venv/bin/python bench/pages_at_scale.py                 # full size, SQLite and PostgreSQL
    .venv/bin/python bench/pages_at_scale.py --scale 0.1     # a tenth (a few minutes on 2 cores)
    .venv/bin/python bench/pages_at_scale.py --db sqlite
    .venv/bin/python bench/pages_at_scale.py --only YAML     # only the pages whose label contains "YAML"

`build_campaign()` is also what tests/trials/test_page_queries.py grows its data with.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import event, insert, select  # noqa: E402
from sqlmodel import Session, col  # noqa: E402

from app.models import (  # noqa: E402
    Approach,
    ApproachStatus,
    Attempt,
    Campaign,
    LogChunk,
    Metric,
    Replay,
    Runner,
    StatusChange,
    Trial,
    TrialState,
    utcnow,
)
from app.services import changes as change_points  # noqa: E402
from app.state import app_state  # noqa: E402

FINGERPRINT_OLD = {
    "hostname": "node-a",
    "gpu_count": 8,
    "sm": "9.0",
    "torch": "2.10.0",
    "cuda": "12.8",
    "nccl": "2.27.3",
    "sglang": "0.5.4",
    "driver": "570.124",
}
FINGERPRINT_NEW = {**FINGERPRINT_OLD, "hostname": "node-b", "torch": "2.11.0"}
METRIC_NAMES = [
    ("allreduce_latency_us", "us"),
    ("allreduce_in_situ_us", "us"),
    ("verify_time_ms", "ms"),
    ("output_throughput_tok_s", "tok/s"),
    ("accept_length", ""),
]
ENDED = [TrialState.succeeded, TrialState.failed, TrialState.timed_out, TrialState.cancelled]
BATCH = 20_000


def _bulk(session: Session, table, rows: list[dict]) -> None:
    for i in range(0, len(rows), BATCH):
        session.execute(insert(table), rows[i : i + BATCH])


def build_campaign(
    engine,
    slug: str = "scale",
    *,
    approaches: int = 500,
    trials: int = 50_000,
    changes_per_trial: int = 3,
    chunks_per_trial: float = 4.5,
    metrics_per_trial: float = 10.38,
    runners: bool = True,
    seed: int = 1,
) -> int:
    """A campaign of this size (rows spread evenly over approaches); returns its id. Adds to the campaign
    when it exists (new approaches after the existing ones)."""
    rng = random.Random(seed)
    now = utcnow()
    with Session(engine) as session:
        campaign = session.execute(select(Campaign).where(col(Campaign.slug) == slug)).scalars().first()
        if campaign is None:
            campaign = Campaign(
                slug=slug,
                name=f"Scale {slug}",
                baseline_tok_s=80.0,
                accept_length=2.4,
                draft_steps=3,
                draft_step_ms=1.2,
                verify_compute_ms=9.0,
            )
            session.add(campaign)
            session.flush()
        cid = campaign.id
        assert cid is not None  # flushed
        if runners and not session.execute(select(col(Runner.id)).limit(1)).first():
            _bulk(
                session,
                Runner,
                [
                    dict(
                        name=f"node-{n}",
                        token_hash=uuid.uuid4().hex,
                        labels=[],
                        fingerprint=fp,
                        connected=True,
                        last_seen_at=now,
                        created_at=now,
                    )
                    for n, fp in (("a", FINGERPRINT_OLD), ("b", FINGERPRINT_NEW))
                ],
            )
        runner_ids = [r for (r,) in session.execute(select(col(Runner.id)).order_by(col(Runner.id)))]
        start = (
            session.execute(
                select(col(Approach.position))
                .where(col(Approach.campaign_id) == cid)
                .order_by(col(Approach.position).desc())
                .limit(1)
            ).scalar()
            or 0
        )
        statuses = [ApproachStatus.dead_end, ApproachStatus.deferred, ApproachStatus.promising, ApproachStatus.untested]
        rows = []
        for i in range(approaches):
            status = statuses[i % len(statuses)]
            bound = status in (ApproachStatus.dead_end, ApproachStatus.deferred) and i % 2 == 0
            rows.append(
                dict(
                    campaign_id=cid,
                    key=f"a{start + i + 1:04d}",
                    title=f"Approach {start + i + 1}",
                    description="",
                    position=start + i + 1,
                    status=status,
                    # Half the bound verdicts carry a team's note: the upgrade planner re-opens them for torch 2.11.
                    reason=("measured; needs torch >= 2.11" if bound and i % 4 == 0 else "measured")
                    if status != "untested"
                    else "",
                    evidence="",
                    effort="",
                    prerequisites="",
                    recipe={"kind": "command", "params": {"argv": ["true"]}, "timeout_s": 60},
                    requirements={"gpus": 8, "min_sm": "9.0", "software": []},
                    verdict_fingerprint=FINGERPRINT_OLD if bound else None,
                    bound_to={"components": ["torch"]} if bound else None,
                    created_at=now,
                    updated_at=now,
                )
            )
        _bulk(session, Approach, rows)
        ids = [
            a
            for (a,) in session.execute(
                select(col(Approach.id))
                .where(col(Approach.campaign_id) == cid, col(Approach.position) > start)
                .order_by(col(Approach.position))
            )
        ]
        per = max(1, trials // max(1, len(ids)))
        t0 = now - timedelta(days=30)
        trial_rows = []
        for n in range(trials):
            approach_id = ids[min(n // per, len(ids) - 1)]
            at = t0 + timedelta(seconds=30 * n)
            trial_rows.append(
                dict(
                    campaign_id=cid,
                    approach_id=approach_id,
                    recipe={},
                    state=rng.choice(ENDED),
                    phase="done",
                    runner_id=runner_ids[n % len(runner_ids)] if runner_ids else None,
                    attempt_id=uuid.uuid4().hex,
                    attempt_count=1,
                    requested_by="bench",
                    error="",
                    gpu_note="",
                    log_bytes=400,
                    log_dropped_bytes=0,
                    cancel_requested=False,
                    created_at=at,
                    dispatched_at=at,
                    started_at=at,
                    finished_at=at + timedelta(seconds=20),
                )
            )
        _bulk(session, Trial, trial_rows)
        trials_made = list(
            session.execute(
                select(col(Trial.id), col(Trial.approach_id), col(Trial.attempt_id), col(Trial.created_at))
                .where(col(Trial.approach_id).in_(ids))
                .order_by(col(Trial.id))
            )
        )
        _bulk(
            session,
            Attempt,
            [
                dict(id=a, trial_id=t, runner_id=None, number=1, state="succeeded", created_at=at)
                for t, _, a, at in trials_made
            ],
        )
        changes, chunks, metrics = [], [], []
        # A trial's events in its approach's history, as the board writes them (inventory.trial_event): kind
        # "trial", at the decided status (from == to), never a status change.
        flow = ["queued", "started", "succeeded"]
        chunk_acc = metric_acc = 0.0
        for t, approach_id, attempt, at in trials_made:
            for k in range(changes_per_trial):
                changes.append(
                    dict(
                        approach_id=approach_id,
                        from_status="untested",
                        to_status="untested",
                        reason=f"trial #{t} {flow[k % len(flow)]}",
                        actor="bench",
                        trial_id=t,
                        kind="trial",
                        at=at + timedelta(seconds=k),
                    )
                )
            chunk_acc += chunks_per_trial
            n_chunks, chunk_acc = int(chunk_acc), chunk_acc - int(chunk_acc)
            for seq in range(n_chunks):
                chunks.append(
                    dict(
                        trial_id=t,
                        attempt_id=attempt,
                        seq=seq,
                        offset=seq * 100,
                        data=f"[{seq}] allreduce bench line ........................................\n",
                        created_at=at,
                    )
                )
            metric_acc += metrics_per_trial
            n_metrics, metric_acc = int(metric_acc), metric_acc - int(metric_acc)
            for m in range(n_metrics):
                name, unit = METRIC_NAMES[m % len(METRIC_NAMES)]
                metrics.append(
                    dict(
                        trial_id=t,
                        approach_id=approach_id,
                        campaign_id=cid,
                        seq=m // 4,
                        index=m % 4,
                        name=name,
                        value=rng.uniform(1, 100),
                        unit=unit,
                        tags={"backend": "nccl", "tokens": [1, 4, 16, 64][m % 4], "world_size": 8, "mode": "graph"},
                        created_at=at,
                    )
                )
            if len(metrics) >= BATCH:
                _bulk(session, Metric, metrics)
                metrics.clear()
            if len(chunks) >= BATCH:
                _bulk(session, LogChunk, chunks)
                chunks.clear()
            if len(changes) >= BATCH:
                _bulk(session, StatusChange, changes)
                changes.clear()
        _bulk(session, Metric, metrics)
        _bulk(session, LogChunk, chunks)
        _bulk(session, StatusChange, changes)
        session.commit()
        return cid


class StatementCounter:
    """SQL statements run on an engine while counting (all threads)."""

    def __init__(self, engine) -> None:
        self.count = 0
        event.listen(engine, "before_cursor_execute", self._on)

    def _on(self, *args) -> None:
        self.count += 1


def _replay_id(engine, slug: str) -> int | None:
    with Session(engine) as session:
        return session.execute(
            select(col(Replay.id))
            .join(Campaign, col(Campaign.id) == col(Replay.campaign_id))
            .where(col(Campaign.slug) == slug)
        ).scalar()


def add_replay(engine, slug: str) -> int:
    """A finished replay on node-b, the worst case: every approach with two succeeded trials is in it (a real
    replay has the bound verdicts only; bound_to holds JSON null, not SQL NULL, so the filter keeps them all):
    per approach, before = its second-newest succeeded trial, after = its newest (that trial's replay_id set),
    so the report compares each pair. Returns its id."""
    with Session(engine) as session:
        cid = session.execute(select(col(Campaign.id)).where(col(Campaign.slug) == slug)).scalar_one()
        bound = session.execute(
            select(Approach)
            .where(col(Approach.campaign_id) == cid, col(Approach.bound_to).is_not(None))
            .order_by(col(Approach.position))
        ).scalars()
        entries: list[dict] = []
        replay = Replay(campaign_id=cid, runner_name="node-b", runner_fingerprint=FINGERPRINT_NEW, state="finished")
        session.add(replay)
        session.flush()
        for a in bound:
            two = session.execute(
                select(col(Trial.id))
                .where(col(Trial.approach_id) == a.id, col(Trial.state) == TrialState.succeeded)
                .order_by(col(Trial.id).desc())
                .limit(2)
            ).all()
            if len(two) < 2:
                continue
            (after,), (before,) = two
            session.get_one(Trial, after).replay_id = replay.id
            entries.append(
                {"approach_id": a.id, "key": a.key, "title": a.title, "status": a.status, "reason": a.reason,
                 "trial_id": before, "stack": "torch 2.10.0+cu128", "bound": "torch 2.10.0+cu128",
                 "retest": "re-test: torch 2.10.0+cu128 -> 2.11.0", "replay_trial_id": after}
            )  # fmt: skip
        replay.entries = entries
        session.commit()
        assert replay.id is not None
        print(f"  replay #{replay.id}: {len(entries)} approaches")
        return replay.id


def pages(client, slug: str, engine) -> list[tuple[str, str | None]]:
    """(label, path) of every page, fragment and API read of a campaign (exports last); the share
    page's path is None (the caller makes the link)."""
    with Session(engine) as session:
        cid = session.execute(select(col(Campaign.id)).where(col(Campaign.slug) == slug)).scalar_one()
        big = session.execute(
            select(col(Approach.key), col(Approach.id))
            .where(col(Approach.campaign_id) == cid)
            .order_by(col(Approach.position))
        ).first()
        assert big is not None
        trial_id = session.execute(
            select(col(Trial.id)).where(col(Trial.approach_id) == big[1]).order_by(col(Trial.id).desc())
        ).scalar()
        assert trial_id is not None
        change_id = session.execute(
            select(col(StatusChange.id))
            .where(col(StatusChange.approach_id) == big[1])
            .order_by(col(StatusChange.at).desc(), col(StatusChange.id).desc())
            .offset(49)
        ).scalar()
    key = big[0]
    return [
        ("campaigns list", "/"),
        ("campaign page", f"/campaigns/{slug}"),
        ("inventory fragment", f"/campaigns/{slug}/inventory"),
        ("recent trials fragment", f"/campaigns/{slug}/trials"),
        ("verdicts fragment", f"/campaigns/{slug}/verdicts"),
        ("approach page", f"/campaigns/{slug}/approaches/{key}"),
        ("approach history: more", f"/campaigns/{slug}/approaches/{key}/history?before={change_id}"),
        ("approach trials fragment", f"/campaigns/{slug}/approaches/{key}/trials"),
        ("approach trials: more", f"/campaigns/{slug}/approaches/{key}/trials?before={trial_id - 10}"),
        ("trial page", f"/trials/{trial_id}"),
        ("trial metrics fragment", f"/trials/{trial_id}/metrics"),
        ("trial verdict fragment", f"/trials/{trial_id}/verdict"),
        ("runners page", "/runners"),
        ("API campaigns", "/api/campaigns"),
        ("API approaches", f"/api/campaigns/{slug}/approaches"),
        ("API history", f"/api/campaigns/{slug}/approaches/{key}/history"),
        ("API trial", f"/api/trials/{trial_id}"),
        ("API runners", "/api/runners"),
        ("API trials (200, campaign)", f"/api/trials?campaign={slug}&limit=200"),
        ("API trials (approach)", f"/api/trials?campaign={slug}&approach={key}"),
        ("API trial metrics", f"/api/trials/{trial_id}/metrics"),
        ("API compare (2 trials)", f"/api/campaigns/{slug}/compare?trial={trial_id}&trial={trial_id - 1}"),
        ("compare page (2 trials)", f"/campaigns/{slug}/compare?trial={trial_id}&trial={trial_id - 1}"),
        ("charts page", f"/campaigns/{slug}/charts"),
        ("API ranking", f"/api/campaigns/{slug}/ranking"),
        ("ranking panel", f"/campaigns/{slug}/ranking"),
        ("API upgrades (torch 2.11)", f"/api/campaigns/{slug}/upgrades?target=torch=2.11.0"),
        ("upgrades page (torch 2.11)", f"/campaigns/{slug}/upgrades?torch=2.11.0"),
        *(
            [
                ("API replay report", f"/api/campaigns/{slug}/replays/{replay_id}"),
                ("replay report page", f"/campaigns/{slug}/replays/{replay_id}"),
            ]
            if (replay_id := _replay_id(engine, slug))
            else []
        ),
        ("status page (share)", None),
        ("export YAML", f"/campaigns/{slug}/export.yaml"),
        ("metrics CSV", f"/campaigns/{slug}/metrics.csv"),
        ("trial log", f"/api/trials/{trial_id}/log"),
    ]


def _status_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def _reset_peak() -> None:
    """Linux: VmHWM (peak RSS) starts again from the current RSS."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def add_long_log(engine, trial_id: int, megabytes: int) -> int:
    """Append `megabytes` MiB of 4 KiB log chunks to the trial's current attempt (after its own); returns the bytes."""
    with Session(engine) as session:
        attempt = session.execute(select(col(Trial.attempt_id)).where(col(Trial.id) == trial_id)).scalar_one()
        last = session.execute(
            select(__import__("sqlalchemy").func.max(LogChunk.seq)).where(col(LogChunk.trial_id) == trial_id)
        ).scalar()
        line = "step 0000123 loss 2.3456 tok/s 81.93 " + "x" * 57 + "\n"  # 96 bytes
        data = line * 42 + "y" * 64 + "\n"  # ~4 KiB
        count = megabytes * 1024 * 1024 // len(data)
        start = (last or 0) + 1
        now = utcnow()
        rows = [
            {
                "trial_id": trial_id,
                "attempt_id": attempt,
                "seq": start + i,
                "offset": i * len(data),
                "data": data,
                "created_at": now,
            }
            for i in range(count)
        ]
        _bulk(session, LogChunk, rows)
        session.commit()
    return count * len(data)


def stream_over_http(app, label: str, path: str, headers: dict[str, str], unit: str) -> None:
    """A streamed body (the campaign YAML, the metrics CSV, a trial's log) through real uvicorn (in a thread), read as
    a stream by curl (or httpx without it) and dropped: this process's CPU time and peak RSS growth are the
    server's (with curl reading). `unit`: what a line is (rows, lines)."""
    import socket
    import threading

    import httpx
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        _reset_peak()
        base = _status_mib("VmRSS")
        rows = size = 0
        t, cpu = time.perf_counter(), time.process_time()
        url = f"http://127.0.0.1:{port}{path}"
        curl = shutil.which("curl")
        if curl:  # read by another process: this one (and its GIL) is the server's alone
            argv = [curl, "-sS", "--fail", *(f for k, v in headers.items() for f in ("-H", f"{k}: {v}")), url]
            with subprocess.Popen(argv, stdout=subprocess.PIPE) as reader:
                assert reader.stdout is not None
                while part := reader.stdout.read(1 << 20):
                    rows += part.count(b"\n")
                    size += len(part)
            if reader.returncode:
                raise RuntimeError(f"curl exited {reader.returncode}")
        else:
            with httpx.stream("GET", url, headers=headers, timeout=600) as r:
                for part in r.iter_bytes():
                    rows += part.count(b"\n")
                    size += len(part)
        seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
        print(
            f"  {label + ' (uvicorn)':28} {seconds * 1000:10.1f} {'':8} {'':8} {size:10,d}  {(rows - 1) / seconds:,.0f} {unit}/s, "
            f"{size / 2**20 / seconds:.1f} MiB/s, server CPU {cpu:.2f} s, peak memory growth "
            f"{_status_mib('VmHWM') - base:.0f} MiB"
        )
    finally:
        server.should_exit = True
        thread.join(10)


def add_sweeps(engine, slug: str, count: int = 20) -> None:
    """The answer over (batch, draft tokens)'s data on `count` of the campaign's approaches: each a verify sweep
    (8 batches x 7 draft tokens, with the decode step per batch) and an allreduce curve, plus one draft sweep,
    every row with 10 samples (tests/support/speculation.py's synthetic physics); per-position alphas entered."""
    from app.db import session_scope
    from tests.support.speculation import SweepBuilder, many_allreduces

    with session_scope(engine) as session:
        campaign = session.execute(select(Campaign).where(col(Campaign.slug) == slug)).scalar_one()
        campaign.accept_alphas = [0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]
        campaign.draft_steps = 3
        rows = (
            session.execute(
                select(Approach)
                .where(col(Approach.campaign_id) == campaign.id)
                .order_by(col(Approach.position))
                .limit(count)
            )
            .scalars()
            .all()
        )
        builder = SweepBuilder(session)
        builder.campaign = campaign
        builder.allreduces = many_allreduces(count)
        for approach, key in zip(rows, builder.allreduces, strict=False):
            builder.verify_sweep(approach)
            builder.allreduce_sweep(approach, key)
        builder.draft_sweep(rows[0])


def time_answer(engine, slug: str, repeat: int) -> None:
    """The answer over (batch, draft tokens) alone, in process: what it adds to the charts and status pages,
    computed afresh (its per-process cache cleared) and then as a page shown again with nothing new gets it."""
    from app.db import session_scope
    from app.domain.answer import read as speculation

    with session_scope(engine, write=False) as session:
        campaign = session.execute(select(Campaign).where(col(Campaign.slug) == slug)).scalar_one()
        for label, clear in (("answer over (b, k), fresh", True), ("answer over (b, k), cached", False)):
            times, cpus = [], []
            for _ in range(repeat):
                if clear:
                    speculation._CACHE.clear()
                t, cpu = time.perf_counter(), time.process_time()
                found = speculation.read_answer(session, campaign).speculation
                times.append((time.perf_counter() - t) * 1000)
                cpus.append((time.process_time() - cpu) * 1000)
            cells = sum(len(a.cells) for a in found.approaches)
            print(
                f"  {label:28} {statistics.median(times):10.1f} {max(times):8.1f} {statistics.median(cpus):7.1f}"
                f"   ({len(found.approaches)} approaches, {cells} cells, {found.resamples} resamples)"
            )
        speculation._CACHE.clear()  # the pages below compute it afresh on their first request


async def _no_change_point_pass(app: Any, poll_s: float = 0.0) -> None:
    return None


def measure(
    db_url: str, scale: float, repeat: int, skip: set[str], log_mib: int = 64, only: set[str] | None = None
) -> None:
    from fastapi.testclient import TestClient

    from app.config import Settings
    from app.db import session_scope
    from app.domain.logins import create_api_token
    from app.domain.sharing import create_share_link, share_token
    from app.main import create_app

    data_dir = Path(tempfile.mkdtemp(prefix="pages-at-scale-"))
    app = create_app(
        Settings(data_dir=data_dir, database_url=db_url, embedded_runner=False, secret_key="bench-" + uuid.uuid4().hex)
    )
    engine = app_state(app).engine
    t = time.perf_counter()
    build_campaign(engine, approaches=max(2, int(500 * scale)), trials=max(4, int(50_000 * scale)))
    add_sweeps(engine, "scale", min(20, max(2, int(500 * scale))))
    add_replay(engine, "scale")
    with session_scope(engine, write=False) as session:
        counts = {
            name: session.execute(select(__import__("sqlalchemy").func.count()).select_from(table)).scalar()
            for name, table in (
                ("approaches", Approach),
                ("trials", Trial),
                ("status changes", StatusChange),
                ("log chunks", LogChunk),
                ("metrics", Metric),
            )
        }
    print(f"  built in {time.perf_counter() - t:.1f} s: " + ", ".join(f"{v:,} {k}" for k, v in counts.items()))
    if engine.dialect.name == "postgresql":
        # What autovacuum does to a table this size soon after the load: statistics, and the visibility map
        # that lets index-only scans skip the heap (a freshly loaded table has none).
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE")
    with session_scope(engine) as session:
        headers = {"Authorization": f"Bearer {create_api_token(session, 'bench')}"}
        campaign = session.execute(select(Campaign).where(col(Campaign.slug) == "scale")).scalar_one()
        share_path = f"/s/{share_token(create_share_link(session, campaign, 'bench', 'bench'), app_state(app).settings.resolved_secret_key())}"
    counter = StatementCounter(engine)
    # The change-point pass would start on the 50,000 freshly loaded trials in this process and take the GIL
    # from the requests being timed (a running board did that work as the trials arrived, off the request
    # path: docs/performance.md "Change points"): it is left out of the app for the timing.
    change_points.run = _no_change_point_pass
    with TestClient(app, base_url="http://127.0.0.1", headers=headers) as client:
        # Two clocks: wall time, and this process's CPU time (the app and the test client; on PostgreSQL the
        # database server's own work is not in it), so a figure inflated by a busy machine shows as wall >> CPU.
        print(f"  {'page':28} {'median ms':>10} {'max ms':>8} {'cpu ms':>7} {'queries':>8} {'bytes':>10}")
        if not only or any("answer" in s for s in only):
            time_answer(engine, "scale", repeat)
        medians: dict[str, tuple[float, float]] = {}
        for label, path in pages(client, "scale", engine):
            if path is None:
                path = share_path
            if only and not any(s in label for s in only):
                continue
            if any(s in label for s in skip):
                print(f"  {label:28} {'skipped':>10}")
                continue
            if label == "export YAML":
                stream_over_http(app, label, path, headers, "lines")
                continue
            if label == "metrics CSV":
                stream_over_http(app, label, path, headers, "rows")
                continue
            if label == "trial log":
                trial_id = int(path.split("/")[3])
                size = add_long_log(engine, trial_id, log_mib)
                print(f"  (added {size / 2**20:.0f} MiB of log to trial #{trial_id})")
                stream_over_http(app, label, path, headers, "lines")
                continue
            times, cpus, size = [], [], 0
            reps = 1 if label.startswith(("export", "metrics")) else repeat
            for _ in range(reps):
                before = counter.count
                t, cpu = time.perf_counter(), time.process_time()
                r = client.get(path)
                times.append((time.perf_counter() - t) * 1000)
                cpus.append((time.process_time() - cpu) * 1000)
                queries = counter.count - before
                size = len(r.content)
                if r.status_code != 200:
                    print(f"  {label:28} HTTP {r.status_code}: {r.text[:120]}")
                    break
            else:
                medians[label] = (statistics.median(times), statistics.median(cpus))
                print(
                    f"  {label:28} {statistics.median(times):10.1f} {max(times):8.1f} {statistics.median(cpus):7.1f} "
                    f"{queries:8d} {size:10,d}"
                )
        if "charts page" in medians and "campaign page" in medians:
            (charts_wall, charts_cpu), (page_wall, page_cpu) = medians["charts page"], medians["campaign page"]
            print(
                f"  charts page / campaign page: {charts_wall / page_wall:.2f}x wall, {charts_cpu / page_cpu:.2f}x CPU "
                "(issue 22's target: at most 3x)"
            )
    engine.dispose()


@contextlib.contextmanager
def scratch_postgres(prefix: str):
    """A fresh PostgreSQL database for one benchmark run (the tests' server, CAMPAIGN_TEST_POSTGRES_URL), its
    URL yielded, dropped afterwards whatever happens."""
    import psycopg

    admin = os.environ.get("CAMPAIGN_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    conninfo = admin.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the full size (1.0: 500 / 50,000)")
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--repeat", type=int, default=5, help="requests per page (the median is printed)")
    parser.add_argument("--skip", action="append", default=[], help="skip pages whose label contains this")
    parser.add_argument("--only", action="append", default=[], help="only pages whose label contains this")
    parser.add_argument("--log-mib", type=int, default=64, help="MiB of log added to one trial for its download")
    args = parser.parse_args()
    print(
        f"pages at scale x{args.scale}; load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
        f"{os.getloadavg()[2]:.2f} on {os.cpu_count()} CPUs"
    )
    if args.db in ("sqlite", "both"):
        print("SQLite")
        measure(
            f"sqlite:///{tempfile.mkdtemp(prefix='pages-at-scale-')}/scale.db",
            args.scale,
            args.repeat,
            set(args.skip),
            args.log_mib,
            set(args.only),
        )
    if args.db in ("postgres", "both"):
        with scratch_postgres("pages_at_scale") as url:
            print("PostgreSQL")
            measure(url, args.scale, args.repeat, set(args.skip), args.log_mib, set(args.only))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
