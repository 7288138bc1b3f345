"""A trial's end to a delivered webhook: a real uvicorn server (ThreadServer, SQLite file), a runner stand-in
over the real websocket ending trials one at a time (spaced past the coalescing window, as trials are), and
a local JSON webhook receiver (Apprise's json://). Prints the end -> received latency (two clocks: the
receiver's arrival time against the moment the runner sent "finished"), then a burst of N events and how
many messages it became.

    .venv/bin/python bench/notifications.py --trials 8 --burst 1000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from app.db import session_scope  # noqa: E402
from app.domain import notifications  # noqa: E402
from tests.support.receiver import Receiver  # noqa: E402
from tests.support.servers import ThreadServer  # noqa: E402
from tests.support.trials import (  # noqa: E402
    ProtocolRunner,
    command_recipe,
    make_settings,
    new_runner_token,
    run_next,
    seed_campaign,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--burst", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        srv = ThreadServer(make_settings(Path(tmp), runner_lost_after_s=600.0)).start()
        try:
            seed_campaign(
                srv.engine,
                "spec",
                [{"key": f"a{n}", "title": f"A{n}", "recipe": command_recipe("true")} for n in range(args.trials)],
            )
            with Receiver() as receiver:
                r = httpx.post(
                    f"{srv.url}/api/notifications",
                    json={"url": receiver.url, "events": ["trial.ended"]},
                    headers=srv.api_headers(),
                )
                r.raise_for_status()
                _, token = new_runner_token(srv.engine)
                runner = ProtocolRunner(srv.ws_url, token)
                latencies = []
                for n in range(args.trials):
                    if n:
                        time.sleep(notifications.COALESCE_S + 0.5)  # trials end apart: each its own message
                    run_next(srv)
                    d = runner.expect("dispatch", skip=("ack", "finished_ack"))
                    runner.started(d)
                    seen = len(receiver.arrivals)
                    ended = time.monotonic()
                    runner.finished(d, exit_code=0)
                    while len(receiver.arrivals) == seen:
                        time.sleep(0.005)
                    latencies.append(receiver.arrivals[seen] - ended)
                runner.close()
                ms = sorted(x * 1000 for x in latencies)
                print(
                    f"trial end -> webhook: median {statistics.median(ms):.0f} ms, min {ms[0]:.0f}, max {ms[-1]:.0f} "
                    f"over {len(ms)} trials (samples ms: {', '.join(f'{x:.0f}' for x in ms)})"
                )
                # A burst: N events written at once, as a flood of trial ends would.
                time.sleep(notifications.COALESCE_S + 0.5)
                before = len(receiver.posts)
                with session_scope(srv.engine) as session:
                    for i in range(args.burst):
                        notifications.record(
                            session,
                            notifications.Event("trial.ended", f"burst:{i}", f"burst {i}", "", "/", None),
                        )
                start = time.monotonic()
                while time.monotonic() - start < 60:
                    with session_scope(srv.engine, write=False) as session:
                        if not notifications.delivery_counts(session).get(r.json()["id"], {}).get("pending"):
                            break
                    time.sleep(0.2)
                sent = len(receiver.posts) - before
                print(f"burst of {args.burst} events -> {sent} message(s) in {time.monotonic() - start:.1f} s")
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
