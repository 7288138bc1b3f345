"""Live-log fan-out benchmark: a real `campaign serve` and `campaign runner` (bench/log_pipeline.py's
Board), many websocket viewers on one trial.

    .venv/bin/python bench/fanout.py                      # 50 viewers, 10,000 lines/s for 10 s
    .venv/bin/python bench/fanout.py --viewers 10 --seconds 5

Prints:
- paced: N viewers on one trial printing 10,000 lines/s: print -> viewer latency p50/p99 over every
  line every viewer got (the first line of each chunk is the earliest printed), lost and duplicated;
- pages during the flood: p50/p99 of the inventory page and /api/campaigns, asked every 50 ms while
  the trial prints (one viewer, an unpaced flood: as fast as the runner reads);
- memory: the server's RSS per connected viewer (N viewers idle on an ended trial), after they
  leave, and before/after 1,000 viewer connections opened, read and closed.
The viewers run as asyncio tasks in this process; the machine's load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any

import httpx
import psutil
from websockets.asyncio.client import connect

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.log_pipeline import FLOOD, PACED, Board, pct  # noqa: E402


def rss_mib(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


class Stats:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.lines = 0
        self.lost = 0
        self.dups = 0


def open_viewer(url: str, origin: str, headers: dict[str, str]) -> Any:
    """A browser's live-log socket (its session cookie and Origin), with whole messages, no compression and
    no pings; `await` it or use it with `async with`."""
    return connect(
        url,
        origin=origin,  # type: ignore[arg-type]
        additional_headers=headers,
        max_size=None,
        compression=None,
        open_timeout=60,
        ping_interval=None,
    )


async def follow(
    url: str, headers: dict[str, str], origin: str, stats: Stats, until: asyncio.Event, expect_lines: list[int]
) -> None:
    """One viewer: reconnects on 4000 with ?after=<last seq>; per message, the latency of each chunk's first
    line and the line count (the lines are numbered: gaps and repeats are counted at the end)."""
    last = -1
    numbers: list[tuple[int, int]] = []  # (first, last) line number per chunk
    while not until.is_set():
        try:
            async with open_viewer(f"{url}?after={last}", origin, headers) as ws:
                while True:
                    try:
                        raw = await asyncio.wait_for(ws.recv(), 0.5)
                    except TimeoutError:
                        if until.is_set() and expect_lines and sum(b - a + 1 for a, b in numbers) >= expect_lines[0]:
                            break
                        if until.is_set() and not expect_lines:
                            break
                        continue
                    now = time.time_ns()
                    msg = json.loads(raw)
                    if msg["type"] != "log":
                        continue
                    for seq, text in msg["chunks"]:
                        last = seq
                        first_nl = text.find("\n")
                        head = text[:first_nl].split(" ", 2)
                        if len(head) == 3 and head[0].isdigit():
                            stats.latencies.append((now - int(head[1])) / 1e6)
                            tail = text[:-1].rsplit("\n", 1)[-1].split(" ", 1)[0]
                            numbers.append((int(head[0]), int(tail)))
                break
        except Exception as exc:
            if getattr(getattr(exc, "rcvd", None), "code", None) != 4000:
                raise
    got = sum(b - a + 1 for a, b in numbers)
    stats.lines += got
    distinct = len({n for a, b in numbers for n in range(a, b + 1)}) if numbers else 0
    stats.dups += got - distinct
    if expect_lines:
        stats.lost += expect_lines[0] - distinct


def probe_pages(url: str, headers: dict[str, str], slug: str, stop: Any, out: Any) -> None:
    """Its own process (spawned): a prober sharing the bench's GIL with the flood's viewer measured the
    bench as much as the server."""
    times: dict[str, list[float]] = {}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        while not stop.is_set():
            for label, path in (("inventory page", f"/campaigns/{slug}"), ("GET /api/campaigns", "/api/campaigns")):
                t = time.perf_counter()
                client.get(path).raise_for_status()
                times.setdefault(label, []).append((time.perf_counter() - t) * 1000)
            time.sleep(0.05)
    out.put(times)


def read_pages(url: str, headers: dict[str, str], path: str, stop: Any, out: Any) -> None:
    """Its own process: someone reading a big page over and over, as fast as the server answers."""
    count = 0
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        while not stop.is_set():
            client.get(path).raise_for_status()
            count += 1
    out.put(count)


def seed_big_campaign(board: Board, approaches: int) -> None:
    board.add_campaign(
        "big",
        [
            {"key": f"approach-{i}", "title": f"Approach number {i}", "description": "An allreduce setting " * 8}
            for i in range(approaches)
        ],
    )


def logs_while_reading(
    board: Board, viewers: int, rate: int, seconds: float, readers: int, viewer_procs: int = 5
) -> None:
    """Live logs while `readers` people re-load a 500-approach campaign page: does rendering pages slow the
    live hub? (With page workers, the hub only relays them.)"""
    ctx = multiprocessing.get_context("spawn")
    stop, counts = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=read_pages, args=(board.url, board.api, "/campaigns/big", stop, counts), daemon=True)
        for _ in range(readers)
    ]
    for proc in procs:
        proc.start()
    time.sleep(1.0)
    try:
        paced(board, viewers, rate, seconds, viewer_procs)
    finally:
        stop.set()
        pages = sum(counts.get(timeout=60) for _ in procs)
        for proc in procs:
            proc.join(30)
    health = httpx.get(board.url + "/healthz").json().get("page_workers")
    where = f"{health['of']} page worker(s)" if health else "no page workers"
    print(f"  ^ while {readers} readers loaded the 500-approach campaign page {pages:,} times ({where})")


def viewer_process(
    urls: Any, ready: Any, headers: dict[str, str], origin: str, n: int, stop: Any, expected: Any, out: Any
) -> None:
    """Its own process: `n` viewers (asyncio websocket clients), like browsers each parsing every message. In
    one process, 50 viewers' JSON parsing alone took most of a core and their own queueing was measured."""
    stats = Stats()
    ready.put(os.getpid())  # imported and waiting: the trial starts only once every viewer process is here
    ws = urls.get(timeout=120)

    async def run() -> None:
        until = asyncio.Event()
        expect: list[int] = []
        tasks = [asyncio.create_task(follow(ws, headers, origin, stats, until, expect)) for _ in range(n)]
        while not stop.is_set():
            await asyncio.sleep(0.1)
        expect.append(expected.value)
        until.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 120)

    asyncio.run(run())
    out.put((array("d", stats.latencies).tobytes(), stats.lines, stats.lost, stats.dups))


def paced(board: Board, viewers: int, rate: int, seconds: float, viewer_procs: int = 5) -> int:
    stats = Stats()
    peak = [rss_mib(board.server.pid)]
    ctx = multiprocessing.get_context("spawn")
    stop, expected, results, urls, ready = ctx.Event(), ctx.Value("q", 0), ctx.Queue(), ctx.Queue(), ctx.Queue()
    shares = [viewers // viewer_procs + (1 if i < viewers % viewer_procs else 0) for i in range(viewer_procs)]
    clients = [
        ctx.Process(
            target=viewer_process,
            args=(urls, ready, board.cookie, board.url, n, stop, expected, results),
            daemon=True,
        )
        for n in shares
        if n
    ]
    for client in clients:
        client.start()
    for _ in clients:
        ready.get(timeout=120)
    tid = board.run_next("paced")
    for _ in clients:
        urls.put(board.url.replace("http", "ws") + f"/api/trials/{tid}/logs/ws")
    procs = {
        "server": [psutil.Process(board.server.pid)],
        "runner+trial": [psutil.Process(board.runner.pid)],
        f"viewers ({len(clients)} processes)": [psutil.Process(c.pid) for c in clients],
    }

    def cpu() -> dict[str, float]:
        out = {}
        for name, group in procs.items():
            total = 0.0
            for proc in group:
                t = proc.cpu_times()
                total += t.user + t.system
                if name == "runner+trial":
                    total += sum(c.cpu_times().user + c.cpu_times().system for c in proc.children(recursive=True))
            out[name] = total
        return out

    cpu_before, wall = cpu(), time.monotonic()

    def run() -> None:
        while True:
            time.sleep(0.5)
            peak.append(rss_mib(board.server.pid))
            t = httpx.get(f"{board.url}/api/trials/{tid}", headers=board.api, timeout=30)
            if t.json()["state"] not in ("queued", "dispatched", "running"):
                break
        cpu_after.update(cpu())
        expected.value = board.stored(tid)[0]
        stop.set()
        for _ in clients:
            lat, lines, lost, dups = results.get(timeout=180)
            stats.latencies.extend(array("d", lat))
            stats.lines += lines
            stats.lost += lost
            stats.dups += dups
        for client in clients:
            client.join(30)

    cpu_after: dict[str, float] = {}
    run()
    wall = time.monotonic() - wall
    used = {name: t - cpu_before.get(name, 0) for name, t in cpu_after.items()}
    stored = board.stored(tid)[0]
    print(
        f"paced: {viewers} viewers, {rate:,} lines/s for {seconds:g} s: print -> viewer p50 {pct(stats.latencies, 50):.1f} ms, "
        f"p99 {pct(stats.latencies, 99):.1f} ms, max {max(stats.latencies, default=float('nan')):.1f} ms; "
        f"stored {stored:,} lines, delivered {stats.lines:,} ({stats.lines / max(1, viewers):,.0f} per viewer), "
        f"lost {stats.lost}, duplicated {stats.dups}; server RSS peak {max(peak):.0f} MiB"
    )
    print(
        "  CPU over the run (cores busy): "
        + ", ".join(f"{name} {t / wall:.2f}" for name, t in used.items())
        + f" ({wall:.1f} s)"
    )
    return tid


def server_side(board: Board, tid: int) -> None:
    """From the trace files (--trace, written at exit): print -> the server's send to each viewer, over
    every (chunk, viewer); the part of the latency that is the server's, whatever the viewers' CPU."""
    import sqlite3

    printed = {}
    con = sqlite3.connect(board.db)
    for seq, data in con.execute('select seq, data from log_chunk where trial_id=? and "offset">=0', (tid,)):
        printed[seq] = int(data.split(" ", 2)[1])
    con.close()
    sent = []
    for path in board.dir.glob("trace.server.*.tsv"):
        for line in path.read_text().splitlines():
            event, trial, seq, t = line.split("\t")
            if event == "s_sent" and int(trial) == tid and int(seq) in printed:
                sent.append((int(t) - printed[int(seq)]) / 1e6)
    print(
        f"  server side (trace): print -> sent to a viewer p50 {pct(sent, 50):.1f} ms, p99 {pct(sent, 99):.1f} ms, "
        f"max {max(sent, default=float('nan')):.1f} ms over {len(sent):,} (chunk, viewer) sends"
    )


def flood_pages(board: Board, seconds: float) -> None:
    tid = board.run_next("flood")
    v = board.viewer(tid)
    v.start()
    ctx = multiprocessing.get_context("spawn")
    stop, results = ctx.Event(), ctx.Queue()
    prober = ctx.Process(target=probe_pages, args=(board.url, board.api, "flood", stop, results), daemon=True)
    prober.start()
    board.wait_done(tid)
    stop.set()
    times: dict[str, list[float]] = results.get(timeout=60)
    prober.join(30)
    v.stop = True
    lines = board.stored(tid)[0]
    health = httpx.get(board.url + "/healthz").json().get("page_workers")
    workers = (
        f"{health['of']} page worker(s), reads served by them {health['served']:,}, by the hub {health['by_hub']:,}"
        if health
        else "no page workers: every read in the hub process"
    )
    print(f"pages during a flood ({lines / seconds:,.0f} lines/s stored, 1 viewer; {workers}):")
    for label, values in times.items():
        print(
            f"  {label:22} p50 {pct(values, 50):6.1f} ms  p99 {pct(values, 99):6.1f} ms  max {max(values):6.1f} ms  "
            f"({len(values)} requests, prober in its own process)"
        )


def memory(board: Board, tid: int, viewers: int, connections: int) -> None:
    ws = board.url.replace("http", "ws") + f"/api/trials/{tid}/logs/ws"

    async def idle_viewers() -> tuple[float, float, float]:
        before = rss_mib(board.server.pid)

        async def viewer() -> Any:
            """Connects and reads its backlog (the whole log) at once, as a browser does, until nothing more
            comes (the trial has ended): a socket left unread meanwhile would be a stuck viewer, dropped."""
            s = await open_viewer(f"{ws}?after=-1", board.url, board.cookie)
            while True:
                try:
                    await asyncio.wait_for(s.recv(), 2.0)
                except TimeoutError:
                    return s

        socks = await asyncio.gather(*(viewer() for _ in range(viewers)))
        during = rss_mib(board.server.pid)
        for s in socks:
            await s.close()
        await asyncio.sleep(2)
        return before, during, rss_mib(board.server.pid)

    async def churn(n: int, parallel: int = 20) -> None:
        async def one() -> None:
            async with open_viewer(f"{ws}?after=-1", board.url, board.cookie) as s:
                await s.recv()  # the state
                await s.recv()  # the first backlog page

        for _ in range(n // parallel):
            await asyncio.gather(*(one() for _ in range(parallel)))

    for round_ in ("first", "second"):  # the second shows whether what stayed is reused or leaked
        before, during, after = asyncio.run(idle_viewers())
        print(
            f"memory ({round_} round): {viewers} viewers connected to an ended trial: "
            f"{(during - before) / viewers * 1024:,.0f} KiB per viewer (RSS {before:.0f} -> {during:.0f} MiB), "
            f"{after:.0f} MiB after they left"
        )
    asyncio.run(churn(100))
    start = rss_mib(board.server.pid)
    t = time.perf_counter()
    asyncio.run(churn(connections))
    time.sleep(2)
    print(
        f"memory: {connections:,} viewer connections opened, read and closed in {time.perf_counter() - t:.1f} s: "
        f"server RSS {start:.0f} -> {rss_mib(board.server.pid):.0f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--viewers", type=int, default=50)
    parser.add_argument("--rate", type=int, default=10_000, help="lines/s the paced trial prints")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--trace", action="store_true", help="also the server's share of the paced latency")
    parser.add_argument(
        "--parts",
        default="paced,memory,flood,reads",
        help="which parts to run (comma-separated): paced, memory, flood (pages during a flood, once per "
        "--page-workers value), reads (live logs while pages are read, once per --page-workers value)",
    )
    parser.add_argument(
        "--viewer-procs", type=int, default=5, help="processes the viewers are spread over (browsers are separate)"
    )
    parser.add_argument("--readers", type=int, default=2, help="processes re-loading a big page in the reads part")
    parser.add_argument(
        "--page-workers",
        default="1,0",
        help="the flood's page probe once per value (CAMPAIGN_PAGE_WORKERS), each on a fresh board",
    )
    args = parser.parse_args()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"fan-out: load average {load} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="fanout-") as tmp:
        board = Board(Path(tmp), trace=args.trace)
        try:
            board.start()
            board.seed(
                [
                    ("paced", PACED.format(rate=args.rate, seconds=args.seconds)),
                    ("flood", FLOOD.format(seconds=args.seconds)),
                ]
            )
            parts = set(args.parts.split(","))
            if parts & {"paced", "memory"}:
                tid = paced(board, args.viewers, args.rate, args.seconds, args.viewer_procs)
            if "memory" in parts:
                memory(board, tid, args.viewers, args.connections)
        finally:
            board.stop()
        for kind in ("flood", "reads"):  # each on a fresh board per --page-workers value
            runs = [int(w) for w in args.page_workers.split(",") if w.strip()] if kind in parts else []
            for n, workers in enumerate(runs):
                other = Board(Path(tmp) / f"{kind}-{n}", page_workers=workers)
                other.dir.mkdir()
                try:
                    other.start()
                    if kind == "flood":
                        other.seed([("flood", FLOOD.format(seconds=args.seconds))])
                        flood_pages(other, args.seconds)
                    else:
                        other.seed([("paced", PACED.format(rate=args.rate, seconds=args.seconds))])
                        seed_big_campaign(other, 500)
                        logs_while_reading(
                            other, args.viewers, args.rate, args.seconds, args.readers, args.viewer_procs
                        )
                finally:
                    other.stop()
        if args.trace and "paced" in parts:
            server_side(board, tid)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
