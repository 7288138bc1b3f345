"""Log pipeline benchmark: a real `campaign serve` (uvicorn, SQLite file), a real `campaign runner`,
a trial printing numbered, timestamped lines, and a websocket viewer of its live log.

    .venv/bin/python bench/log_pipeline.py --seconds 10

Prints, for our pipeline and for the floor (a bare loopback websocket relay: producer -> relay ->
viewer carrying the same lines, no database), the sustained lines/s and MB/s (stored, resp.
relayed), the print -> viewer latency p50/p99 at a fixed 10,000 lines/s, lost and duplicated
lines, our figures as ratios to the floor, and the server's RSS while a stuck viewer (one that
never reads) follows a flood. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psutil
from websockets.sync.client import connect
from websockets.typing import Origin

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.net import free_port  # noqa: E402

# The trial programs: every line is "<n> <time.time_ns()> <padding>\n" (~64 bytes).
FLOOD = """
import sys, time
end = time.time() + {seconds}
out = sys.stdout
n = 0
pad = "x" * 36
while time.time() < end:
    t = time.time_ns()
    out.write("".join(f"{{i}} {{t}} {{pad}}\\n" for i in range(n, n + 1000)))
    n += 1000
out.flush()
"""
PACED = """
import sys, time
rate, seconds = {rate}, {seconds}
out = sys.stdout
pad = "x" * 36
start = time.time()
n = 0
while True:
    now = time.time()
    if now - start >= seconds:
        break
    due = int((now - start) * rate)
    if due > n:
        t = time.time_ns()
        out.write("".join(f"{{i}} {{t}} {{pad}}\\n" for i in range(n, due)))
        out.flush()
        n = due
    time.sleep(0.0005)
"""


class Viewer(threading.Thread):
    """Follows a websocket of log chunks; checks numbering; records print -> receive latency."""

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        expected: int | None = None,
        origin: str | None = None,
        relay: bool = False,
    ) -> None:
        super().__init__(daemon=True)
        self.url, self.headers, self.relay = url, headers, relay
        self.origin = Origin(origin) if origin is not None else None
        self.trial_id: int | None = None  # set by the caller, for the trace report
        self.expected = expected
        self.seen: set[int] = set()
        self.dups = 0
        self.latencies: list[float] = []
        self.lines = 0
        self.bytes = 0
        self.first = self.last = 0.0
        self.chunk_times: dict[int, int] = {}  # seq -> when its message arrived (time_ns)
        self.carry = ""
        self.done = threading.Event()
        self.ready = threading.Event()
        self.stop = False

    def run(self) -> None:
        self.last_seq = -1
        self.resyncs = 0
        while not self.stop and not self.done.is_set():
            url = self.url if self.relay else f"{self.url}?after={self.last_seq}"
            with connect(
                url,
                additional_headers=self.headers,
                origin=self.origin,
                max_size=None,
                open_timeout=20,
            ) as ws:
                self.ready.set()
                while not self.stop:
                    try:
                        raw = ws.recv(timeout=0.5)
                    except TimeoutError:
                        if self.expected is not None and len(self.seen) >= self.expected:
                            self.done.set()
                            break
                        continue
                    except Exception as exc:  # closed: 4000 means "fell behind, reconnect with after=N"
                        if getattr(getattr(exc, "rcvd", None), "code", None) == 4000:
                            self.resyncs += 1
                            break
                        self.done.set()
                        break
                    now = time.time_ns()
                    if self.relay:
                        texts = [raw.decode() if isinstance(raw, bytes) else raw]
                    else:
                        msg = json.loads(raw)
                        if msg["type"] != "log":
                            continue
                        texts = [text for _, text in msg["chunks"]]
                        self.last_seq = msg["chunks"][-1][0]
                        for seq, _ in msg["chunks"]:
                            self.chunk_times.setdefault(seq, now)
                    for text in texts:
                        self._take(text, now)
                    if self.expected is not None and len(self.seen) >= self.expected:
                        self.done.set()
                        break
        self.done.set()

    def _take(self, text: str, now: int) -> None:
        text = self.carry + text
        cut = text.rfind("\n")
        self.carry = text[cut + 1 :]
        if not self.first:
            self.first = time.monotonic()
        self.last = time.monotonic()
        self.bytes += cut + 1
        for line in text[:cut].split("\n"):
            parts = numbered(line)
            if parts is None:
                continue  # the runner's own lines, the cap's "bytes dropped" marker
            i, t = parts
            if i in self.seen:
                self.dups += 1
            else:
                self.seen.add(i)
            self.latencies.append((now - t) / 1e6)
            self.lines += 1


def numbered(line: str) -> tuple[int, int] | None:
    """(n, print time_ns) of a trial program's line "<n> <time_ns> <padding>"; None for any other line (the
    runner's own "[runner] ..." line that opens every trial, the cap's marker). The viewer and the stored
    count both use this, so "lost" counts only program lines that reached the database and not the viewer."""
    parts = line.split(" ", 2)
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return int(parts[0]), int(parts[1])


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


class Board:
    """`campaign serve` + `campaign runner` in their own processes on a fresh data dir."""

    def __init__(
        self, workdir: Path, trace: bool = False, page_workers: int | None = None, search_index: bool = True
    ) -> None:
        self.dir = workdir
        self.search_index = search_index
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.db = workdir / "bench.db"
        self.env = {
            **os.environ,
            "CAMPAIGN_DATA_DIR": str(workdir / "data"),
            "CAMPAIGN_DATABASE_URL": f"sqlite:///{self.db}",
            "CAMPAIGN_PORT": str(self.port),
            "CAMPAIGN_SECRET_KEY": uuid.uuid4().hex,
            "PYTHONUNBUFFERED": "1",
            # Throughput runs measure ingest, not the cap: keep every line.
            "CAMPAIGN_LOG_CAP_BYTES": str(4 * 2**30),
        }
        if page_workers is not None:  # processes serving pages beside the hub (app/pageworkers/pool.py)
            self.env["CAMPAIGN_PAGE_WORKERS"] = str(page_workers)
        if trace:  # per-hop timestamps from the server and the runner (app/live.py Trace)
            self.env["CAMPAIGN_LOG_TRACE"] = str(workdir / "trace")
        self.procs: list[subprocess.Popen] = []

    def cli(self, *args: str, env: dict[str, str] | None = None) -> str:
        return subprocess.run(
            [sys.executable, "-m", "app.cli", *args],
            env=env or self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    def start(self) -> None:
        log = open(self.dir / "server.log", "w")
        # --search-index off: the same server without the hub's log indexer (app/services/search.py), for comparison.
        serve = ["-m", "app.cli"] if self.search_index else ["-c", NO_SEARCH_INDEX]
        self.server = subprocess.Popen(
            [sys.executable, *serve, "serve", "--no-runner"],
            env=self.env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append(self.server)
        for _ in range(300):
            try:
                health = httpx.get(self.url + "/healthz", timeout=1)
                workers = health.json().get("page_workers")
                if health.status_code == 200 and (workers is None or workers["ready"] == workers["of"]):
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.api = {"Authorization": "Bearer " + self.cli("token", "create", "bench")}
        token = self.cli("runners", "create", "bench-node")
        rlog = open(self.dir / "runner.log", "w")
        self.runner = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "app.cli",
                "runner",
                "--server",
                self.url,
                "--spool-dir",
                str(self.dir / "spool"),
                "--name",
                "bench-node",
            ],
            env={**self.env, "CAMPAIGN_RUNNER_TOKEN": token},
            cwd=ROOT,
            stdout=rlog,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append(self.runner)
        login = self.cli("login-url").split("token=", 1)[1]
        r = httpx.get(f"{self.url}/login?token={login}", follow_redirects=False)
        if "cb_session" not in r.cookies:  # a new board's first login names its admin first
            r = httpx.post(
                f"{self.url}/login",
                data={"token": login, "name": "bench"},
                headers={"Origin": self.url},
                follow_redirects=False,
            )
        self.cookie = {"Cookie": f"cb_session={r.cookies['cb_session']}"}
        for _ in range(300):
            if [x for x in httpx.get(self.url + "/api/runners", headers=self.api).json() if x["status"] == "online"]:
                return
            time.sleep(0.1)
        raise RuntimeError("the runner did not connect")

    def seed(self, approaches: list[tuple[str, str]]) -> None:
        """One campaign per program (a finished trial's approach is untested again)."""
        from app.db import make_engine, session_scope
        from app.models import Approach, Campaign

        engine = make_engine(f"sqlite:///{self.db}")
        with session_scope(engine) as session:
            for key, script in approaches:
                campaign = Campaign(slug=key, name=key)
                session.add(campaign)
                session.flush()
                assert campaign.id is not None
                session.add(
                    Approach(
                        campaign_id=campaign.id,
                        key=key,
                        title=key,
                        position=1,
                        recipe={
                            "kind": "command",
                            "params": {"argv": [sys.executable, "-c", script]},
                            "timeout_s": 600,
                        },
                    )
                )
        engine.dispose()

    def add_campaign(self, slug: str, approaches: list[dict[str, Any]]) -> None:
        """A campaign with these approaches (Approach fields; positions in list order)."""
        from app.db import make_engine, session_scope
        from app.models import Approach, Campaign

        engine = make_engine(f"sqlite:///{self.db}")
        with session_scope(engine) as session:
            campaign = Campaign(slug=slug, name=slug)
            session.add(campaign)
            session.flush()
            assert campaign.id is not None
            for i, fields in enumerate(approaches):
                session.add(Approach(campaign_id=campaign.id, position=i + 1, **fields))
        engine.dispose()

    def run_next(self, slug: str) -> int:
        body = httpx.post(f"{self.url}/api/campaigns/{slug}/run-next", headers=self.api, timeout=30).json()
        assert body["started"], body
        return body["trial_id"]

    def wait_done(self, trial_id: int, timeout: float = 600) -> dict:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                t = httpx.get(f"{self.url}/api/trials/{trial_id}", headers=self.api, timeout=5).json()
            except httpx.TimeoutException:  # the server is busy with a flood: say so, ask again
                print(f"  (GET /api/trials/{trial_id} took over 5 s; asking again)")
                continue
            if t["state"] not in ("queued", "dispatched", "running"):
                return t
            time.sleep(0.2)
        raise RuntimeError("trial did not finish")

    def viewer(self, trial_id: int, expected: int | None = None) -> Viewer:
        ws = self.url.replace("http", "ws") + f"/api/trials/{trial_id}/logs/ws"
        return Viewer(ws, self.cookie, expected, origin=self.url)

    def stored(self, trial_id: int) -> tuple[int, int, float]:
        """(the program's numbered lines, bytes, seconds between the first and last stored chunk); bytes and
        seconds are of every stored chunk, the runner's own lines included."""
        con = sqlite3.connect(self.db)
        rows = con.execute(
            'select data, created_at from log_chunk where trial_id=? and "offset">=0 order by seq', (trial_id,)
        ).fetchall()
        con.close()
        text = "".join(r[0] for r in rows)
        from datetime import datetime

        times = sorted(datetime.fromisoformat(r[1]) for r in rows)
        lines = sum(numbered(line) is not None for line in text.split("\n"))
        return lines, len(text.encode()), (times[-1] - times[0]).total_seconds() if rows else 0.0

    def stop(self) -> None:
        for p in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(20)
            except Exception:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


# The path to the viewer (s_early: handed to the viewers' queues before the commit, for an attempt already
# validated), then the storage path the acks wait for (and the viewers, for a first batch).
HOPS = ["print", "r_read", "r_spooled", "r_sent", "s_received", "s_parsed", "s_early", "s_dequeued", "s_sent", "viewer"]
STORE_HOPS = ["s_parsed", "s_thread", "s_applied", "s_committed", "s_resumed"]


def hop_report(board: Board, trial_id: int, viewer: Viewer) -> None:
    """Per-hop latency of one trial's chunks, from the trace files (run with --trace; the processes
    write them at exit, so call this after board.stop())."""
    events: dict[str, dict[int, int]] = {h: {} for h in HOPS + STORE_HOPS}
    probes: dict[str, list[tuple[int, int]]] = {"gc": [], "loop_lag": []}
    for path in board.dir.glob("trace.*.tsv"):
        for line in path.read_text().splitlines():
            event, trial, seq, t = line.split("\t")
            if event in probes:
                probes[event].append((int(trial), int(seq)))
            elif int(trial) == trial_id and event in events:
                events[event].setdefault(int(seq), int(t))
    from runners.process import STARTED_PREFIX as runner_line

    con = sqlite3.connect(board.db)
    for seq, data in con.execute('select seq, data from log_chunk where trial_id=? and "offset">=0', (trial_id,)):
        if data.startswith(runner_line):
            continue  # the runner's own first line, written as it spawned the program
        events["print"][seq] = int(data.split(" ", 2)[1])  # the chunk's first (earliest printed) line
    con.close()
    events["viewer"] = dict(viewer.chunk_times)
    seqs = [s for s in events["print"] if all(s in events[h] for h in HOPS + STORE_HOPS)]
    if not seqs:
        print("  (no complete trace)")
        return
    total = {s: (events["viewer"][s] - events["print"][s]) / 1e6 for s in seqs}
    slow = sorted(seqs, key=lambda s: total[s])[int(0.99 * len(seqs)) :]
    print(
        f"  per hop, ms, over {len(seqs):,} chunks (first line's print time); 'slowest 1%' = mean over the "
        f"{len(slow)} chunks with the highest print -> viewer"
    )
    print(f"  {'hop':<28} {'p50':>7} {'p99':>7} {'max':>7} {'slowest 1%':>11}")
    for a, b in list(zip(HOPS, HOPS[1:])) + list(zip(STORE_HOPS, STORE_HOPS[1:])):
        if a == STORE_HOPS[0]:
            print("  storage (acks wait for it):")
        d = [(events[b][s] - events[a][s]) / 1e6 for s in seqs]
        d_slow = [(events[b][s] - events[a][s]) / 1e6 for s in slow]
        print(
            f"  {a + ' -> ' + b:<28} {pct(d, 50):7.2f} {pct(d, 99):7.2f} {max(d):7.2f} {statistics.mean(d_slow):11.2f}"
        )
    d = list(total.values())
    print(f"  {'print -> viewer (chunk)':<28} {pct(d, 50):7.2f} {pct(d, 99):7.2f} {max(d):7.2f}")
    gcs = [us for gen, us in probes["gc"] if gen == 2]
    lags = [us for _, us in probes["loop_lag"]]
    print(
        f"  server, whole run: {len(probes['gc'])} GCs ({len(gcs)} gen-2, longest {max(gcs, default=0) / 1e3:.1f} ms); "
        f"{len(lags)} event-loop stalls > 5 ms (longest {max(lags, default=0) / 1e3:.1f} ms)"
    )


def settle() -> None:
    """Before a latency run: this process's viewer must not be what is measured. A flood leaves tens of
    millions of entries in the viewers' sets and lists; every full collection of the collector would walk
    them (hundreds of ms, which showed up as 'print -> viewer' p99). Release them, freeze what is left."""
    import gc

    gc.collect()
    gc.freeze()


def release(viewer: Viewer) -> None:
    """Drop a finished run's per-line bookkeeping (its figures are printed already)."""
    viewer.seen = set()
    viewer.latencies = []
    viewer.chunk_times = {}


NO_SEARCH_INDEX = """
import sys
import app.services.search as indexer

async def _off(app, poll_s=0.0):
    return None

indexer.run = _off
sys.argv[0] = "campaign"
from app.cli import main
main()
"""


class IndexWatch(threading.Thread):
    """The search index's lag behind the log pipeline (SQLite): every 0.1 s, the newest stored chunk's id, the
    hub indexer's cursor (search_cursor) and its gaps (search_log_gap: chunks below the cursor not yet indexed),
    read from the database file. A chunk's lag: from the first sample that saw it stored to the first that saw it
    indexed, at or below the cursor and in no gap (0.1 s resolution)."""

    def __init__(self, db: Path) -> None:
        super().__init__(daemon=True)
        self.db = db
        # (time, newest chunk id, cursor, gaps (after_id, before_id), chunks waiting in gaps)
        self.samples: list[tuple[float, int, int, list[tuple[int, int]], int]] = []
        self.halt = False

    def run(self) -> None:
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=5)
        while not self.halt:
            try:
                top = conn.execute("SELECT coalesce(max(id), 0) FROM log_chunk").fetchone()[0]
                cursor = conn.execute("SELECT last_id FROM search_cursor WHERE name = 'log'").fetchone()[0]
                gaps = [tuple(g) for g in conn.execute("SELECT after_id, before_id FROM search_log_gap")]
                waiting = sum(
                    conn.execute("SELECT count(*) FROM log_chunk WHERE id > ? AND id < ?", g).fetchone()[0]
                    for g in gaps
                )
                self.samples.append((time.monotonic(), top, cursor, gaps, waiting))
            except sqlite3.Error:
                pass
            time.sleep(0.1)
        conn.close()

    def report(self, label: str, start: float, end: float) -> None:
        """The lag of the chunks first seen stored between start and end, and the backlog at end."""
        lags: list[float] = []
        seen = [s for s in self.samples if s[0] <= start]
        low = seen[-1][1] if seen else 0
        pending: list[int] = []  # chunk ids seen stored, not yet seen indexed (ascending)
        stored_at: dict[int, float] = {}
        for t, top, cursor, gaps, _ in self.samples:
            if t > end and not pending:
                break
            if start <= t <= end and top > low:
                pending += range(low + 1, top + 1)  # ids between (trimmed ones too) count as stored chunks
                stored_at.update(dict.fromkeys(range(low + 1, top + 1), t))
                low = top
            # indexed: the ids at or below the cursor outside the gaps (after_id, before_id)
            edge = 1
            spans = []
            for after, before in sorted(gaps):
                spans.append((edge, min(after, cursor)))
                edge = before
            spans.append((edge, cursor))
            for lo, hi in spans:
                i, j = bisect.bisect_left(pending, lo), bisect.bisect_right(pending, hi)
                lags += [(t - stored_at[c]) * 1000 for c in pending[i:j]]
                del pending[i:j]
        lags += [float("inf")] * len(pending)
        last = [s for s in self.samples if s[0] <= end]
        backlog = last[-1][1] - last[-1][2] + last[-1][4] if last else 0
        if not lags:
            print(f"search index ({label}): no chunks stored")
            return
        late = sum(lag == float("inf") for lag in lags)
        print(
            f"search index ({label}): {len(lags):,} chunks, commit -> searchable p50 {pct(lags, 50):.0f} ms, "
            f"p90 {pct(lags, 90):.0f} ms, max {max(lags):.0f} ms"
            + (f" ({late:,} not yet indexed when the run ended)" if late else "")
            + f"; backlog at the end {backlog:,} chunks"
        )


def paced_run(board: Board, slug: str, rate: int, seconds: float, label: str) -> Viewer:
    settle()
    tid = board.run_next(slug)
    v = board.viewer(tid, expected=None)
    v.start()
    board.wait_done(tid)
    lines, _, _ = board.stored(tid)
    v.expected = lines
    v.done.wait(30)
    v.stop = True
    v.trial_id = tid
    print(
        f"paced  ours ({label}): {rate:,} lines/s for {seconds:g} s: latency p50 {pct(v.latencies, 50):.1f} ms, "
        f"p99 {pct(v.latencies, 99):.1f} ms, max {max(v.latencies):.1f} ms; stored {lines:,}, "
        f"lost {lines - len(v.seen)}, duplicated {v.dups}"
    )
    return v


# ---- the floor: producer -> relay -> viewer, loopback websockets, no database ---------------------


def relay_main(port: int) -> None:
    from websockets.asyncio.server import serve

    viewers: set = set()

    async def handler(ws) -> None:
        if ws.request.path == "/view":
            viewers.add(ws)
            await ws.wait_closed()
            viewers.discard(ws)
            return
        async for message in ws:  # the producer
            for v in list(viewers):
                await v.send(message)

    async def main() -> None:
        async with serve(handler, "127.0.0.1", port, max_size=None):
            await asyncio.Future()

    asyncio.run(main())


def producer_main(port: int, script: str) -> None:
    """Run the same trial program, read its stdout in 64 KiB reads, send line-cut chunks."""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    with connect(f"ws://127.0.0.1:{port}/produce", max_size=None) as ws:
        carry = b""
        fd = proc.stdout.fileno()  # type: ignore[union-attr]
        while True:
            data = os.read(fd, 65536)
            if not data:
                break
            data = carry + data
            cut = data.rfind(b"\n") + 1
            carry = data[cut:]
            if cut:
                ws.send(data[:cut].decode())
    proc.wait()


def floor(script: str, expected: int | None, workdir: Path) -> Viewer:
    port = free_port()
    relay = subprocess.Popen([sys.executable, __file__, "--role", "relay", "--port", str(port)], cwd=ROOT)
    try:
        for _ in range(100):
            try:
                with connect(f"ws://127.0.0.1:{port}/view"):
                    pass
                break
            except OSError:
                time.sleep(0.05)
        viewer = Viewer(f"ws://127.0.0.1:{port}/view", {}, expected, relay=True)
        viewer.start()
        viewer.ready.wait(10)
        (workdir / "floor.py").write_text(script)
        subprocess.run(
            [
                sys.executable,
                __file__,
                "--role",
                "producer",
                "--port",
                str(port),
                "--script",
                str(workdir / "floor.py"),
            ],
            cwd=ROOT,
            check=True,
        )
        viewer.done.wait(3 if expected is None else 30)
        viewer.stop = True
        return viewer
    finally:
        relay.terminate()
        relay.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="How long each trial prints.")
    ap.add_argument("--rate", type=int, default=10_000, help="Lines/s of the latency run.")
    ap.add_argument(
        "--trace",
        action="store_true",
        help="Per-hop latency of the paced runs (server and runner write timestamps; a little slower).",
    )
    ap.add_argument("--no-floor", action="store_true", help="Skip the bare-relay floor runs (quicker).")
    ap.add_argument("--no-stuck", action="store_true", help="Skip the stuck-viewer run (quicker).")
    ap.add_argument(
        "--search-index",
        choices=["on", "off"],
        default="on",
        help="The hub's search log indexer (on: as the board runs; off: the server without it, to compare). On "
        "also prints the index's lag behind each run (commit -> searchable) and its backlog.",
    )
    ap.add_argument("--role", choices=["relay", "producer"], help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--script", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "relay":
        return relay_main(args.port)
    if args.role == "producer":
        return producer_main(args.port, Path(args.script).read_text())

    flood = FLOOD.format(seconds=args.seconds)
    paced = PACED.format(rate=args.rate, seconds=args.seconds)
    paced_lines = int(args.rate * args.seconds)
    work = Path(tempfile.mkdtemp(prefix="cb-bench-"))
    board = Board(work, trace=args.trace, search_index=args.search_index == "on")
    watch = IndexWatch(board.db) if args.search_index == "on" else None
    marks: dict[str, tuple[float, float]] = {}
    fresh = after = None
    print(f"# {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}, work dir {work}")
    try:
        board.start()
        board.seed([("flood", flood), ("paced", paced), ("paced-after", paced), ("stuck", flood)])
        server = psutil.Process(board.server.pid)
        if watch is not None:
            watch.start()

        # 0. Paced at --rate lines/s on the fresh server and database: print -> viewer latency.
        started = time.monotonic()
        fresh = paced_run(board, "paced", args.rate, args.seconds, "fresh database")
        marks["paced, fresh database"] = (started, time.monotonic())
        started = time.monotonic()

        # 1. Flood: sustained ingest with one live viewer.
        peak_flood = 0
        tid = board.run_next("flood")
        v = board.viewer(tid)
        v.start()
        sampler_stop = threading.Event()

        def sample() -> None:
            nonlocal peak_flood
            while not sampler_stop.is_set():
                peak_flood = max(peak_flood, server.memory_info().rss)
                time.sleep(0.1)

        threading.Thread(target=sample, daemon=True).start()
        t = board.wait_done(tid)
        sampler_stop.set()
        lines, nbytes, span = board.stored(tid)
        v.expected = lines
        v.done.wait(60)
        v.stop = True
        v.join(10)
        ours_rate = lines / span if span else float("nan")
        print(
            f"flood  ours : {lines:,} lines stored in {span:.2f} s = {ours_rate:,.0f} lines/s, "
            f"{nbytes / span / 1e6:.1f} MB/s; trial {t['state']}; viewer got {len(v.seen):,} lines, "
            f"lost {lines - len(v.seen)}, duplicated {v.dups}, resynced {v.resyncs}x; "
            f"server RSS peak {peak_flood / 2**20:.0f} MiB"
        )
        marks["flood"] = (started, time.monotonic())
        release(v)
        if not args.no_floor:
            f = floor(flood, None, work)
            floor_span = (f.last - f.first) or float("nan")
            floor_rate = len(f.seen) / floor_span
            print(
                f"flood  floor: {len(f.seen):,} lines relayed in {floor_span:.2f} s = {floor_rate:,.0f} lines/s, "
                f"{f.bytes / floor_span / 1e6:.1f} MB/s; duplicated {f.dups}"
            )
            print(f"flood  ratio: ours/floor = {ours_rate / floor_rate:.2f}")
            release(f)

        # 2. Paced again, same server and database, right after the flood (~500 MB written).
        started = time.monotonic()
        v = after = paced_run(board, "paced-after", args.rate, args.seconds, "after the flood")
        marks["paced, after the flood"] = (started, time.monotonic())
        if not args.no_floor:
            f = floor(paced, paced_lines, work)
            printed = max(f.seen) + 1 if f.seen else 0
            print(
                f"paced  floor: latency p50 {pct(f.latencies, 50):.1f} ms, p99 {pct(f.latencies, 99):.1f} ms; "
                f"lost {printed - len(f.seen)}, duplicated {f.dups}"
            )
            print(
                f"paced  ratio (after the flood): p50 ours/floor = {pct(v.latencies, 50) / pct(f.latencies, 50):.2f}, "
                f"p99 ours/floor = {pct(v.latencies, 99) / pct(f.latencies, 99):.2f}"
            )

        # 3. A stuck viewer (never reads) during a flood: the server's memory stays bounded.
        if args.no_stuck:
            return
        rss_before = server.memory_info().rss
        tid = board.run_next("stuck")
        ws = board.url.replace("http", "ws") + f"/api/trials/{tid}/logs/ws?after=-1"
        stuck = connect(
            ws, additional_headers=board.cookie, origin=Origin(board.url), max_queue=1, max_size=None
        ).__enter__()
        peak = rss_before
        while True:
            peak = max(peak, server.memory_info().rss)
            state = httpx.get(f"{board.url}/api/trials/{tid}", headers=board.api).json()["state"]
            if state not in ("queued", "dispatched", "running"):
                break
            time.sleep(0.25)
        lines, _, _ = board.stored(tid)
        try:
            while True:
                stuck.recv(timeout=2)
        except Exception as exc:
            closed = getattr(getattr(exc, "rcvd", None), "code", None)
        print(
            f"stuck viewer: {lines:,} lines stored meanwhile; server RSS {rss_before / 2**20:.0f} MiB before, "
            f"peak {peak / 2**20:.0f} MiB during; the viewer was closed with code {closed} (4000 = resync)"
        )
    finally:
        if watch is not None:
            for label, (start, end) in marks.items():
                watch.report(label, start, end)
            watch.halt = True
            (work / "index_watch.json").write_text(
                json.dumps(watch.samples)
            )  # (time, newest chunk, cursor, gaps, in gaps)
        board.stop()
        if args.trace:
            for label, viewer in (("fresh database", fresh), ("after the flood", after)):
                if viewer is not None and viewer.trial_id is not None:
                    print(f"paced ({label}), trial {viewer.trial_id}:")
                    hop_report(board, viewer.trial_id, viewer)


if __name__ == "__main__":
    main()
