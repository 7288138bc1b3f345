"""The real SGLang release the contract tests run against, installed by scripts/ensure-sglang.

sglang never enters the test process: it is imported by child processes whose PYTHONPATH holds the
target directory (and tests/contract/importshims for torchvision, see its docstring). Set
CAMPAIGN_SGLANG_DIR to use an existing install; SGLANG_VERSION picks another release to check.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.sglang import SGLANG_VERSION


@pytest.fixture(scope="session")
def sglang_dir() -> Path:
    if os.environ.get("CAMPAIGN_SGLANG_DIR"):
        return Path(os.environ["CAMPAIGN_SGLANG_DIR"])
    done = subprocess.run(
        [str(ROOT / "scripts" / "ensure-sglang")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, "SGLANG_VERSION": SGLANG_VERSION, "PYTHON": sys.executable},
    )
    assert done.returncode == 0, f"scripts/ensure-sglang failed:\n{done.stdout}\n{done.stderr}"
    return ROOT / done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def sglang_env(sglang_dir: Path) -> dict[str, str]:
    """Environment for a child python that imports the real sglang."""
    path = os.pathsep.join([str(sglang_dir), str(ROOT / "tests" / "contract" / "importshims"), str(ROOT)])
    return {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@pytest.fixture(scope="session")
def sglang_source(sglang_dir: Path) -> Path:
    return sglang_dir / "sglang"
