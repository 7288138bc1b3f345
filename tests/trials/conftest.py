"""Fixtures for trials tests (helpers live in tests/support/)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.servers import ThreadServer
from tests.support.trials import make_settings


@pytest.fixture
def server(tmp_path) -> Iterator[ThreadServer]:
    srv = ThreadServer(make_settings(tmp_path)).start()
    try:
        yield srv
    finally:
        srv.stop()
