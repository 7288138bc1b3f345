"""Property 10: `campaign login-url` prints the host and port the server actually listens on,
also when `campaign serve` got them as options rather than settings; the printed link logs in."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx

from tests.support.net import free_port
from tests.support.paths import ROOT


def _cli(env: dict[str, str], *args: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.strip()


def test_login_url_names_the_listening_host_and_port(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPAIGN_")}
    env.update(CAMPAIGN_DATA_DIR=str(tmp_path / "data"), CAMPAIGN_SECRET_KEY="k" * 40)
    # --port and --host on the command line; the settings still say the default 127.0.0.1:8000.
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--no-runner", "--host", "localhost", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                assert time.monotonic() < deadline and proc.poll() is None, "campaign serve did not come up"
                time.sleep(0.2)
        url = _cli(env, "login-url")
        assert url.startswith(f"http://localhost:{port}/login?token="), url
        # A new board: the link is the first-admin link; its form makes the admin and logs in.
        r = httpx.get(url, follow_redirects=False, timeout=30)
        assert r.status_code == 200 and "name this board's admin" in r.text
        token = url.split("token=", 1)[1]
        r = httpx.post(
            f"http://localhost:{port}/login", data={"token": token, "name": "admin"}, follow_redirects=False, timeout=30
        )
        assert r.status_code == 303 and r.cookies.get("cb_session")
        # From now on a printed link logs straight in as that admin.
        r = httpx.get(_cli(env, "login-url"), follow_redirects=False, timeout=30)
        assert r.status_code == 303 and r.cookies.get("cb_session")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    # No server running: the settings' address, and the record of the stopped server is gone.
    assert not (tmp_path / "data" / "server.json").exists()
    assert _cli(env, "login-url").startswith("http://127.0.0.1:8000/login?token=")
