"""One page worker (the pool: app/pageworkers/pool.py): the app in its "pages" role on a Unix socket, started by
the hub (`python -m app.pageworkers.worker --uds PATH --parent PID`) with the hub's settings in its environment."""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
import threading
import time

import uvicorn

from app.config import get_settings
from app.main import create_app
from app.protocol.logconfig import configure_logging

PR_SET_PDEATHSIG = 1


def exit_with(parent: int) -> None:
    """End this worker when the hub ends, however it ends: the kernel's parent-death signal where there is
    one (Linux), and a check of the parent process every second everywhere."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    if os.getppid() != parent:
        sys.exit(0)
    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--uds", required=True, help="the Unix socket to serve on")
    parser.add_argument("--parent", type=int, required=True, help="the hub's process id")
    args = parser.parse_args()
    exit_with(args.parent)
    settings = get_settings()
    configure_logging(settings.log_level)
    app = create_app(settings, run_migrations=False, role="pages")
    # The hub adds its own Server and Date headers and already applied the forwarded headers.
    uvicorn.run(
        app,
        uds=args.uds,
        log_level="warning",
        proxy_headers=False,
        server_header=False,
        date_header=False,
        timeout_graceful_shutdown=5,
    )


if __name__ == "__main__":
    main()
