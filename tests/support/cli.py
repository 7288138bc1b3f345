"""`campaign` in a subprocess on its own data directory: the `run` fixture of the CLI tests (tests/conftest.py
registers it)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.paths import ROOT


@pytest.fixture
def run(tmp_path):
    env = {**os.environ, "CAMPAIGN_DATA_DIR": str(tmp_path / "data"), "CAMPAIGN_SECRET_KEY": "cli-test"}
    env.pop("CAMPAIGN_DATABASE_URL", None)

    def _run(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "app.cli", *args],
            env=env,
            cwd=ROOT,
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
        )

    return _run
