"""Run a campaign on this node end to end: a real server, its embedded runner, "Run next
candidate" until nothing is left, each proposed verdict confirmed, then the results exported.

    python bench/shootout_on_node.py --campaign allreduce-shootout --out results/

Writes <out>/<campaign>.yaml (the campaign file), <out>/<campaign>-metrics.csv,
<out>/summary.json and <out>/server.log. This is what produced docs/results.md on 2x H200.
Uses only the server's HTTP API (the same one scripts use), with an API token.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
TERMINAL = {"succeeded", "failed", "cancelled", "timed_out", "lost"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--campaign", default="allreduce-shootout")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--max-trials", type=int, default=30)
    ap.add_argument("--deadline-s", type=float, default=500, help="stop starting trials after this")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {**os.environ, "CAMPAIGN_DATA_DIR": str(args.out / "data"), "CAMPAIGN_PORT": str(port),
           "PYTHONUNBUFFERED": "1"}
    env.pop("CAMPAIGN_DATABASE_URL", None)
    cli = [sys.executable, "-m", "app.cli"]
    log = open(args.out / "server.log", "w")
    server = subprocess.Popen([*cli, "serve", "--demo"], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    started = time.monotonic()
    summary: dict = {"campaign": args.campaign, "trials": []}
    try:
        base = f"http://127.0.0.1:{port}"
        while True:
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() - started > 60:
                raise SystemExit(f"server did not start; see {args.out / 'server.log'}")
            time.sleep(0.2)
        token = subprocess.run([*cli, "token", "create", "shootout"], env=env, cwd=ROOT, check=True,
                               capture_output=True, text=True).stdout.strip()
        api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        while not any(r["connected"] for r in api.get("/api/runners").json()):
            if time.monotonic() - started > 90:
                raise SystemExit("the embedded runner did not connect")
            time.sleep(0.5)
        runner = next(r for r in api.get("/api/runners").json() if r["connected"])
        summary["fingerprint"] = runner["fingerprint"]
        print("runner:", json.dumps(runner["fingerprint"]), flush=True)
        for _ in range(args.max_trials):
            if time.monotonic() - started > args.deadline_s:
                print("deadline reached: not starting more trials", flush=True)
                break
            nxt = api.post(f"/api/campaigns/{args.campaign}/run-next").json()
            if not nxt["started"]:
                print("run next:", nxt["reason"], flush=True)
                summary["stopped_because"] = nxt["reason"]
                break
            trial_id, t0 = nxt["trial_id"], time.monotonic()
            while (view := api.get(f"/api/trials/{trial_id}").json())["state"] not in TERMINAL:
                time.sleep(0.5)
            proposal = api.get(f"/api/trials/{trial_id}/proposal").json()
            api.post(f"/api/trials/{trial_id}/verdict", json={
                "status": proposal["status"], "reason": proposal["reason"], "components": proposal["components"]})
            row = {"trial": trial_id, "approach": nxt["approach"], "state": view["state"],
                   "seconds": round(time.monotonic() - t0, 1), "verdict": proposal["status"],
                   "reason": proposal["reason"], "gpu_released": view["gpu_released"], "gpu_note": view["gpu_note"]}
            summary["trials"].append(row)
            print(json.dumps(row), flush=True)
        (args.out / f"{args.campaign}.yaml").write_text(api.get(f"/api/campaigns/{args.campaign}/export").text)
        (args.out / f"{args.campaign}-metrics.csv").write_text(api.get(f"/api/campaigns/{args.campaign}/metrics.csv").text)
    finally:
        (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(server.pid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
