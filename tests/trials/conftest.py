"""Fixtures for trials tests (helpers live in trials_support.py)."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from trials_support import ThreadServer, make_settings


@pytest.fixture
def server(tmp_path) -> Iterator[ThreadServer]:
    srv = ThreadServer(make_settings(tmp_path)).start()
    try:
        yield srv
    finally:
        srv.stop()


