"""The embedded runner: the local runner `campaign serve` starts as its child process (app/services/lifespan.py
is its only user) and stops on shutdown. The runner itself is runners/agent.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from runners.agent import TOKEN_ENV
from runners.process import SECRET_ENV


def start_embedded(
    server_url: str, token: str, spool_dir: Path, *, name: str = "embedded", labels: Sequence[str] = ()
) -> subprocess.Popen[bytes]:
    """Start the local runner of `campaign serve` as a child process and return it.

    It runs `python -m app.cli runner --server URL --spool-dir DIR --name NAME --token-file -`
    and writes the token to its stdin (never on the command line, where `ps` shows it, nor in
    its environment, which trials could inherit); the server's secrets (secret key, database
    URL) are left out of its environment. It inherits stdout/stderr, and stops by itself when this process dies. The caller creates the
    runner's row and token first, starts it once the server listens (it reconnects with
    backoff until then anyway), and calls `stop_embedded` on shutdown.
    """
    argv = [
        sys.executable,
        "-m",
        "app.cli",
        "runner",
        "--server",
        server_url,
        "--spool-dir",
        str(spool_dir),
        "--name",
        name,
        "--parent-pid",
        str(os.getpid()),
        "--token-file",
        "-",
    ]
    if labels:
        argv += ["--labels", ",".join(labels)]
    server_secrets = {"CAMPAIGN_SECRET_KEY", "CAMPAIGN_DATABASE_URL", TOKEN_ENV, *SECRET_ENV}
    env = {key: value for key, value in os.environ.items() if key not in server_secrets}
    runner = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, start_new_session=True)
    assert runner.stdin is not None  # stdin=PIPE
    runner.stdin.write(token.encode() + b"\n")
    runner.stdin.close()
    return runner


def stop_embedded(runner: subprocess.Popen[bytes], timeout_s: float = 30.0) -> int | None:
    """Stop a runner started by `start_embedded`: SIGTERM (it cancels its running trial and
    reports it), then SIGKILL after timeout_s. Returns its exit code."""
    if runner.poll() is None:
        runner.terminate()
        try:
            runner.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            runner.kill()
            runner.wait()
    return runner.returncode
