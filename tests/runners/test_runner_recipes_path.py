"""How the recipes' interpreter (the node's torch or SGLang environment) finds the runner's `runners` package:
from a checkout, through its root; from a runner installed in a venv of its own, through a directory that
holds only `runners` and `app` (for the vocabulary in `app.protocol`), so none of the runner venv's other packages comes ahead of the node's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from runners.recipes import build_launch, runners_path
from tests.support.paths import ROOT


def _site_packages(tmp_path: Path) -> Path:
    """A runner venv's site-packages: this checkout's `runners`, beside a package the node must not see."""
    site = tmp_path / "runner-venv" / "lib" / "python3.11" / "site-packages"
    (site / "runner_only_pkg").mkdir(parents=True)
    (site / "runner_only_pkg" / "__init__.py").write_text("")
    (site / "runners").symlink_to(ROOT / "runners")
    (site / "app").symlink_to(ROOT / "app")
    return site


def _imports(path: str, *modules: str) -> list[str]:
    code = "import importlib.util, sys\nfor m in sys.argv[1:]: print(m, importlib.util.find_spec(m) is not None)"
    done = subprocess.run(
        [sys.executable, "-c", code, *modules],
        env={**os.environ, "PYTHONPATH": path},
        cwd="/",
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


def test_a_checkout_is_on_the_path_as_it_is():
    assert runners_path() == str(ROOT)
    spec = build_launch({"kind": "draft_step", "params": {"device": "cpu"}})
    assert spec.env["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)


def test_an_installed_runner_shows_the_node_only_its_runners_package_and_the_shared_vocabulary(tmp_path, monkeypatch):
    site = _site_packages(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    entry = runners_path(str(site))
    assert Path(entry).is_relative_to(tmp_path / "cache" / "campaign-board")
    assert sorted(os.listdir(entry)) == ["app", "runners"]
    assert Path(entry, "runners").resolve() == (ROOT / "runners").resolve()
    assert Path(entry, "app").resolve() == (ROOT / "app").resolve()
    assert runners_path(str(site)) == entry  # the same entry each time, made once
    assert _imports(entry, "runners.recipes", "app.protocol.metrics", "runner_only_pkg") == [
        "runners.recipes",
        "True",
        "app.protocol.metrics",
        "True",
        "runner_only_pkg",
        "False",
    ]
    assert _imports(str(site), "runner_only_pkg") == ["runner_only_pkg", "True"]  # what the root would have shown


def test_without_a_writable_cache_the_root_is_used(tmp_path, monkeypatch):
    site = _site_packages(tmp_path)
    blocked = tmp_path / "blocked"
    blocked.write_text("a file, not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    assert runners_path(str(site)) == str(site)
