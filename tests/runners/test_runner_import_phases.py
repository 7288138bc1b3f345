"""A recipe is never silent while a heavy module imports: `announce_import` prints the phase before the
import starts and a line and the phase `running` once it has ended. The slow module here waits at a gate
the test opens, so "before the import ended" is an order of events, not a time."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from app.protocol.metrics import PHASE_PREFIX
from tests.support.paths import ROOT

PROGRAM = """
import sys
from runners.recipes._loading import announce_import
announce_import("slowpkg")
try:
    import slowpkg
except ImportError as exc:
    print("import failed:", exc, flush=True)
    sys.exit(1)
print("recipe body, value", slowpkg.VALUE, flush=True)
"""


def _slow_package(root: Path, gate: Path, reached: Path) -> None:
    """slowpkg: its import says it has begun, then waits until `gate` exists."""
    package = root / "slowpkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        textwrap.dedent(f"""\
        import os, time
        open({str(reached)!r}, "w").close()
        while not os.path.exists({str(gate)!r}):
            time.sleep(0.02)
        __version__ = "1.2.3"
        VALUE = __spec__.loader.__class__.__name__
    """)
    )


def _start(site: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", PROGRAM],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{site}", "PYTHONUNBUFFERED": "1", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_the_phase_comes_before_the_import_ends_and_the_line_after(tmp_path):
    gate, reached = tmp_path / "gate", tmp_path / "reached"
    _slow_package(tmp_path / "site", gate, reached)
    proc = _start(tmp_path / "site")
    assert proc.stdout is not None
    try:
        # The first line arrives while the import is held at its gate.
        assert proc.stdout.readline() == f"{PHASE_PREFIX}importing slowpkg\n"
        assert not gate.exists() and proc.poll() is None
        for _ in range(3000):  # wait until the import itself has begun (it waits for the gate next)
            if reached.exists() or proc.poll() is not None:
                break
            time.sleep(0.02)
        assert reached.exists() and not gate.exists()
        gate.write_text("open")
        rest = proc.communicate(timeout=60)[0].splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rest[0].startswith("slowpkg 1.2.3 imported in ") and rest[0].endswith(" s")
    assert rest[1:] == [f"{PHASE_PREFIX}running", "recipe body, value SourceFileLoader"]  # its own loader again
    assert proc.returncode == 0


@pytest.mark.parametrize("rank_env", [{"RANK": "1"}, {"SLURM_PROCID": "3"}])
def test_only_the_launcher_and_rank_0_announce(tmp_path, rank_env):
    gate, reached = tmp_path / "gate", tmp_path / "reached"
    _slow_package(tmp_path / "site", gate, reached)
    gate.write_text("open")
    out = _start(tmp_path / "site", **rank_env).communicate(timeout=60)[0]
    assert out == "recipe body, value SourceFileLoader\n"


def test_a_module_that_is_not_installed_still_fails_as_an_import_error(tmp_path):
    out = _start(tmp_path / "empty").communicate(timeout=60)[0]
    assert out.splitlines() == [f"{PHASE_PREFIX}importing slowpkg", "import failed: No module named 'slowpkg'"]
