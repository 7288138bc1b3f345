"""The browser tests' shared server. `demo_server` is one `campaign serve --demo --no-runner` for a whole module
(the same command as the `live_server` fixture, which starts one per test): for modules whose tests only read, or
change only what they made themselves under their own names, so that no test sees another's change. Each test logs
in with its own link (`tests.support.browser.login_url`). A test that needs another configuration (a runner, page
workers, settings) or that changes what the others read (the demo campaigns' approaches, people's roles, shutdown)
keeps a server of its own.

The browser itself is per module (tests/conftest.py says why) with a new context or page per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.servers import LiveServer, start_live_server, stop_live_server


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("demo-server")
    server = start_live_server(tmp, f"sqlite:///{tmp / 'live.db'}", "--demo", "--no-runner")
    try:
        yield server
    finally:
        stop_live_server(server)
