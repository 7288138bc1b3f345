"""Page-feed benchmark: a real `campaign serve` and `campaign runner` (bench/log_pipeline.py's Board),
many open page feeds (websockets, as the pages open them) on one campaign while its trials run.

    .venv/bin/python bench/pagefeed.py                    # 50 feeds, 10 trials
    .venv/bin/python bench/pagefeed.py --feeds 10 --trials 3

Each trial prints 200 phase lines as fast as it can (a storm of state changes: each phase is a
page event) and 20,000 log lines (log chunks are not page events). Prints, for 0 and N feeds:
- notices per feed per trial (coalescing: at most one per topic per 200 ms, however many changes);
- end -> notice latency p50/p99: from the moment a reader polling the API every 20 ms first sees the
  trial ended (its commit, give or take 20 ms) to each feed's first notice after it;
- the server's CPU seconds per trial (with N feeds open against none: the feed's cost per viewer).
The feeds run as asyncio tasks in this process; the machine's load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
from websockets.asyncio.client import connect
from websockets.typing import Origin

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.services.events import feed_path  # noqa: E402
from bench.log_pipeline import Board, pct  # noqa: E402

STORM = """
import sys
for i in range(200):
    print(f"@@campaign-phase step {i}", flush=True)
    for j in range(100):
        sys.stdout.write(f"line {i} {j} " + "x" * 60 + "\\n")
    sys.stdout.flush()
print("done", flush=True)
"""


async def feed(url: str, board: Board, arrivals: list[float], ready: asyncio.Event) -> None:
    async with connect(url, additional_headers=board.cookie, origin=Origin(board.url)) as socket:
        ready.set()
        async for _notice in socket:  # until the task is cancelled
            arrivals.append(time.time())


def visible_end(board: Board, trial_id: int) -> float:
    """When the trial's end became visible to a reader (GET /api/trials/{id} every 20 ms): the commit."""
    with httpx.Client(base_url=board.url, headers=board.api, timeout=30) as client:
        while True:
            if client.get(f"/api/trials/{trial_id}").json()["state"] not in ("queued", "dispatched", "running"):
                return time.time()
            time.sleep(0.02)


async def run(board: Board, slug: str, campaign_id: int, feeds: int, trials: int) -> dict[str, float]:
    url = "ws" + board.url.removeprefix("http") + feed_path([f"campaign:{campaign_id}", "runners"])
    arrivals: list[list[float]] = [[] for _ in range(feeds)]
    readies = [asyncio.Event() for _ in range(feeds)]
    tasks = [asyncio.create_task(feed(url, board, arrivals[i], readies[i])) for i in range(feeds)]
    for ready in readies:
        await asyncio.wait_for(ready.wait(), 60)
    server = psutil.Process(board.server.pid)
    cpu0 = sum(server.cpu_times()[:2])
    latencies: list[float] = []
    before = [0] * feeds
    notices: list[int] = []
    for _ in range(trials):
        tid = await asyncio.to_thread(board.run_next, slug)
        ended = await asyncio.to_thread(visible_end, board, tid)
        await asyncio.sleep(1.0)  # let the window's last notice arrive
        for i, got in enumerate(arrivals):
            after_end = [t for t in got[before[i] :] if t >= ended - 0.02]
            if after_end:
                latencies.append((after_end[0] - ended) * 1000)
            notices.append(len(got) - before[i])
            before[i] = len(got)
    cpu = sum(server.cpu_times()[:2]) - cpu0
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "notices per feed per trial (mean)": sum(notices) / len(notices) if notices else 0.0,
        "notices per feed per trial (max)": max(notices) if notices else 0.0,
        "end -> notice p50 ms": pct(latencies, 50) if latencies else float("nan"),
        "end -> notice p99 ms": pct(latencies, 99) if latencies else float("nan"),
        "server CPU s per trial": cpu / trials,
    }


def seed(board: Board, approaches: int) -> None:
    """One campaign, one approach per trial (run next takes the next untested one each time)."""
    recipe = {"kind": "command", "params": {"argv": [sys.executable, "-c", STORM]}, "timeout_s": 600}
    board.add_campaign(
        "storm", [{"key": f"storm-{i}", "title": f"storm {i}", "recipe": recipe} for i in range(approaches)]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--feeds", type=int, default=50)
    ap.add_argument("--trials", type=int, default=10)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        board = Board(Path(tmp))
        board.start()
        seed(board, 2 * args.trials)
        try:
            campaign_id = httpx.get(f"{board.url}/api/campaigns/storm", headers=board.api).json()["id"]
            print(f"load average before: {os.getloadavg()}")
            for n in (1, args.feeds):  # one feed: the baseline of the server's CPU per trial
                figures = asyncio.run(run(board, "storm", campaign_id, n, args.trials))
                print(f"{n} feed(s), {args.trials} trials of 200 phases + 20,000 lines each:")
                for k, v in figures.items():
                    print(f"  {k:38} {v:8.2f}")
            print(f"load average after: {os.getloadavg()}")
        finally:
            board.stop()


if __name__ == "__main__":
    main()
