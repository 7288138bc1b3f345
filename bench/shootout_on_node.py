"""Run a campaign on this node end to end: a real server, its embedded runner, "Run next
candidate" until nothing is left, each proposed verdict confirmed, then the results exported.

    python bench/shootout_on_node.py --campaign allreduce-shootout --out results/

Writes <out>/<campaign>.yaml (the campaign file), <out>/<campaign>-metrics.csv,
<out>/summary.json (rewritten after every trial) and <out>/server.log. Uses only the server's
HTTP API (the same one scripts use), with an API token.

Robust on a short lease: each trial has a deadline (`--trial-deadline-s`; past it the trial is
cancelled through the API and the run goes on), a trial that fails or cannot be confirmed is
recorded and the run goes on, no trial starts after `--deadline-s`, and the campaign file and
metrics are exported whatever happened.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.net import free_port  # noqa: E402

TERMINAL = {"succeeded", "failed", "cancelled", "timed_out", "lost"}
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


class Shootout:
    def __init__(self, api: httpx.Client, campaign: str, trial_deadline_s: float):
        self.api, self.campaign, self.trial_deadline_s = api, campaign, trial_deadline_s

    def runner_busy(self) -> bool:
        return any(r.get("connected") and r.get("status") == "busy" for r in self.api.get("/api/runners").json())

    def run_next(self) -> dict:
        """run-next; while the runner is still busy (a cancelled trial tearing down) the trial waits in the
        board's queue and starts when it frees up: followed like a started one."""
        nxt = self.api.post(f"/api/campaigns/{self.campaign}/run-next").json()
        if not nxt.get("started") and not nxt.get("queued") and self.runner_busy():
            end = time.monotonic() + 90
            while self.runner_busy() and time.monotonic() < end:
                time.sleep(1)
            nxt = self.api.post(f"/api/campaigns/{self.campaign}/run-next").json()
        return nxt

    def one_trial(self, nxt: dict, skipped: bool = False) -> dict:
        trial_id, t0 = nxt["trial_id"], time.monotonic()
        row: dict = {"trial": trial_id, "approach": nxt["approach"]}
        view: dict = {}
        cancelled = False
        while True:
            try:
                view = self.api.get(f"/api/trials/{trial_id}").json()
            except httpx.HTTPError as exc:
                log(f"trial {trial_id}: status read failed ({exc}); retrying")
            if view.get("state") in TERMINAL:
                break
            elapsed = time.monotonic() - t0
            if elapsed > self.trial_deadline_s and not cancelled:
                log(f"trial {trial_id} ({nxt['approach']}): past its {self.trial_deadline_s:g}s deadline; cancelling")
                self.api.post(f"/api/trials/{trial_id}/cancel")
                cancelled = True
            if elapsed > self.trial_deadline_s + 60:
                row["error"] = "did not end within 60 s of its cancel"
                break
            time.sleep(0.5)
        row.update(
            {
                "state": view.get("state"),
                "seconds": round(time.monotonic() - t0, 1),
                "deadline_cancelled": cancelled,
                "gpu_released": view.get("gpu_released"),
                "gpu_note": view.get("gpu_note"),
            }
        )
        if view.get("state") not in TERMINAL:
            return row
        try:
            proposal = self.api.get(f"/api/trials/{trial_id}/proposal")
            proposal.raise_for_status()
            p = proposal.json()
            status, reason = p["status"], p["reason"]
            if status == "untested":
                # A cancelled or lost trial proposes "untested", and run next would start it again:
                # defer it, saying why, so the session moves on (a person can re-queue it).
                status = "deferred"
                reason = (
                    f"{reason}; deferred by bench/shootout_on_node.py"
                    + (f" (cancelled at its {self.trial_deadline_s:g}s deadline)" if cancelled else "")
                    + (" (skipped: --skip)" if skipped else "")
                )
            confirmed = self.api.post(
                f"/api/trials/{trial_id}/verdict",
                json={"status": status, "reason": reason, "components": p["components"]},
            )
            confirmed.raise_for_status()
            row.update({"verdict": status, "reason": reason})
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            row["verdict_error"] = str(exc)[:300]
        return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--campaign", default="allreduce-shootout")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--max-trials", type=int, default=40)
    ap.add_argument("--deadline-s", type=float, default=500, help="stop starting trials after this")
    ap.add_argument("--trial-deadline-s", type=float, default=240, help="cancel a trial running longer")
    ap.add_argument("--skip", default="", help="approach keys to leave untested (comma-separated)")
    ap.add_argument("--import", dest="import_file", type=Path, help="a campaign file to import before running it")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    def on_term(signum: int, _frame) -> None:
        raise SystemExit(f"stopped by signal {signum}")  # the finally block still exports

    signal.signal(signal.SIGTERM, on_term)
    for key, value in SAFE_ENV.items():
        os.environ.setdefault(key, value)
    port = free_port()
    env = {
        **os.environ,
        "CAMPAIGN_DATA_DIR": str(args.out / "data"),
        "CAMPAIGN_PORT": str(port),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("CAMPAIGN_DATABASE_URL", None)
    cli = [sys.executable, "-m", "app.cli"]
    server_log = open(args.out / "server.log", "w")
    server = subprocess.Popen(
        [*cli, "serve", "--demo"],
        env=env,
        cwd=ROOT,
        stdout=server_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    started = time.monotonic()
    summary: dict = {"campaign": args.campaign, "trials": []}
    summary_path = args.out / "summary.json"
    api = None
    code = 0
    current: dict = {}  # the trial in flight, if any
    try:
        base = f"http://127.0.0.1:{port}"
        while True:
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() - started > 90:
                raise SystemExit(f"server did not start; see {args.out / 'server.log'}")
            time.sleep(0.2)
        token = (
            subprocess.run(
                [*cli, "token", "create", "shootout"],
                env=env,
                cwd=ROOT,
                check=True,
                capture_output=True,
                text=True,
                timeout=60,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        if args.import_file:
            imported = subprocess.run(
                [*cli, "import", str(args.import_file.resolve())],
                env=env,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=60,
            )
            output = (imported.stdout + imported.stderr).strip()[-500:]
            log(f"import {args.import_file}: exit {imported.returncode} {output}")
            if imported.returncode:
                raise SystemExit(f"campaign import failed: {imported.stderr.strip()[-500:]}")
        while not any(r["connected"] for r in api.get("/api/runners").json()):
            if time.monotonic() - started > 120:
                raise SystemExit("the embedded runner did not connect")
            time.sleep(0.5)
        runner = next(r for r in api.get("/api/runners").json() if r["connected"])
        summary["fingerprint"] = runner.get("fingerprint")
        log("runner: " + json.dumps(runner.get("fingerprint")))
        shootout = Shootout(api, args.campaign, args.trial_deadline_s)
        skip = {k for k in args.skip.split(",") if k}
        for _ in range(args.max_trials):
            if time.monotonic() - started > args.deadline_s:
                log("deadline reached: not starting more trials")
                summary["stopped_because"] = f"deadline {args.deadline_s:g}s"
                break
            try:
                nxt = shootout.run_next()
            except httpx.HTTPError as exc:
                log(f"run next failed: {exc}")
                summary["stopped_because"] = f"run next failed: {exc}"
                code = 1
                break
            if not nxt.get("started") and not nxt.get("queued"):
                log(f"run next: {nxt.get('reason')}")
                summary["stopped_because"] = nxt.get("reason")
                break
            skipped = nxt["approach"] in skip
            if skipped:
                log(f"skipping {nxt['approach']}")
                api.post(f"/api/trials/{nxt['trial_id']}/cancel")
            log(f"trial {nxt['trial_id']}: {nxt['approach']}")
            current = nxt
            try:
                row = shootout.one_trial(nxt, skipped)
            except Exception as exc:
                row = {"trial": nxt["trial_id"], "approach": nxt["approach"], "error": repr(exc)[:300]}
            current = {}
            summary["trials"].append(row)
            summary_path.write_text(json.dumps(summary, indent=2))
            log(json.dumps(row))
    except SystemExit as exc:
        summary["error"] = str(exc)
        log(str(exc))
        code = 1
    finally:
        if api is not None and current:
            try:  # stopped mid-trial: cancel it through the API so its verdict and log say so
                api.post(f"/api/trials/{current['trial_id']}/cancel")
                end = time.monotonic() + 15
                while time.monotonic() < end:
                    if api.get(f"/api/trials/{current['trial_id']}").json().get("state") in TERMINAL:
                        break
                    time.sleep(0.5)
                summary["trials"].append(
                    {
                        "trial": current["trial_id"],
                        "approach": current["approach"],
                        "state": "cancelled",
                        "error": "the session stopped during this trial",
                    }
                )
            except httpx.HTTPError as exc:
                summary.setdefault("export_errors", []).append(f"cancel of the trial in flight: {exc}")
        if api is not None:
            for name, path in (
                (f"{args.campaign}.yaml", f"/api/campaigns/{args.campaign}/export"),
                (f"{args.campaign}-metrics.csv", f"/api/campaigns/{args.campaign}/metrics.csv"),
            ):
                try:
                    response = api.get(path)
                    response.raise_for_status()
                    (args.out / name).write_text(response.text)
                except httpx.HTTPError as exc:
                    summary.setdefault("export_errors", []).append(f"{path}: {exc}")
        summary["seconds"] = round(time.monotonic() - started, 1)
        summary_path.write_text(json.dumps(summary, indent=2))
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        except ProcessLookupError:
            pass
    done = [t for t in summary["trials"] if t.get("state") == "succeeded"]
    log(f"{len(done)} of {len(summary['trials'])} trials succeeded; results in {args.out}")
    return code


if __name__ == "__main__":
    sys.exit(main())
