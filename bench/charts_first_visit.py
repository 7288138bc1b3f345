"""The charts page's first visit in Chromium with a cold cache: a real `campaign serve --demo --no-runner`, a
logged-in browser context with an empty HTTP cache per run, and the time from navigation start to the first
drawn chart (a [data-figure] div holding Plotly's SVG), plus the bytes the page loaded.

    .venv/bin/python bench/charts_first_visit.py                       # this checkout, 7 runs
    .venv/bin/python bench/charts_first_visit.py --checkout /tmp/old   # another checkout's server (before/after)
    .venv/bin/python bench/charts_first_visit.py --runs 11 --path /campaigns/allreduce-shootout/charts
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.db import make_engine, session_scope  # noqa: E402
from app.domain.logins import create_login_token  # noqa: E402
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS  # noqa: E402
from tests.support.servers import start_live_server, stop_live_server  # noqa: E402

FIRST_CHART = "() => document.querySelector('[data-figure] .main-svg') ? performance.now() : false"
LOADED = "performance.getEntriesByType('resource').reduce((n, e) => n + e.encodedBodySize, 0)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkout", type=Path, default=ROOT, help="the checkout whose server is measured")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--path", default="/campaigns/kimi-k25-eagle3/charts")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    tmp = Path(tempfile.mkdtemp(prefix="charts-first-visit-"))
    checkout = args.checkout.resolve()
    server = start_live_server(
        tmp,
        f"sqlite:///{tmp / 'live.db'}",
        "--demo",
        "--no-runner",
        env={"PYTHONPATH": str(checkout)},
        cwd=checkout,
    )
    engine = make_engine(server.env["CAMPAIGN_DATABASE_URL"])
    times, sizes = [], []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            for _ in range(args.runs):
                with session_scope(engine) as session:
                    token = create_login_token(session, 600)
                login = browser.new_context()
                login.new_page().goto(f"{server.url}/login?token={token}")
                cookies = login.cookies()
                login.close()
                context = browser.new_context(viewport={"width": 1366, "height": 900})  # an empty HTTP cache
                context.add_cookies([{k: v for k, v in c.items()} for c in cookies])  # type: ignore[misc]
                page = context.new_page()
                page.goto(server.url + args.path, wait_until="commit")
                times.append(page.wait_for_function(FIRST_CHART, timeout=60_000).json_value())
                page.wait_for_load_state("load")
                sizes.append(page.evaluate(LOADED))
                context.close()
            browser.close()
    finally:
        engine.dispose()
        stop_live_server(server)
    print(f"checkout {checkout} ({args.path}), {args.runs} cold-cache visits, load average {os.getloadavg()[0]:.2f}")
    print(
        f"  first drawn chart: median {statistics.median(times):.0f} ms, min {min(times):.0f}, max {max(times):.0f};"
        f" resources loaded {statistics.median(sizes):,.0f} bytes"
    )


if __name__ == "__main__":
    main()
