"""The package as a GPU node installs it: build the wheel from this checkout, install it into a fresh venv
outside the checkout, and run `campaign serve --demo --no-runner` and `campaign runner --help` from another
directory, and the installed runner on this interpreter's torch (`--python`). Also: the `runner` extra brings
what the runner and its recipes import, and asks for torch by a range, never a pin."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.paths import ROOT
from tests.support.servers import start_live_server, stop_live_server

# Not part of a source tree a wheel is built from.
NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "data",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    "node_modules",
    "test-results",
    "*.db",
    "*.db-wal",
    "*.db-shm",
)
# Imported inside try/except with a fallback, so no extra has to bring them.
OPTIONAL_IMPORTS = {"pynvml"}  # runners/fingerprint.py falls back to nvidia-smi
# runners/preflight/probes.py runs under the node's own sglang interpreter (sglang's environment has these);
# the board never installs them.
NODE_SGLANG_IMPORTS = {"sglang", "flashinfer"}
# Shipped with the node's CUDA torch (one of its requirements there), which the runner never installs or pins:
# only moe_step's int4 kernel imports it, on a GPU (runners/recipes/_moe_int4.py).
NODE_TORCH_IMPORTS = {"triton"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel `pip wheel` builds from a copy of this checkout (so no build/ is left in it)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=NOT_SOURCE)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp / "dist"), str(src)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (built,) = (tmp / "dist").glob("campaign_board-*.whl")
    return built


def test_the_wheel_holds_every_package_and_the_files_the_server_reads(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for root in ("app", "runners"):
        for init in (ROOT / root).rglob("__init__.py"):
            assert init.relative_to(ROOT).as_posix() in names, f"package {init.parent} is missing from the wheel"
    expected = [
        f"app/templates/{p.relative_to(ROOT / 'templates').as_posix()}" for p in (ROOT / "templates").rglob("*.html")
    ]
    expected += [
        f"app/static/{p.relative_to(ROOT / 'static').as_posix()}" for p in (ROOT / "static").rglob("*") if p.is_file()
    ]
    expected += [
        f"app/alembic/{p.relative_to(ROOT / 'alembic').as_posix()}"
        for p in (ROOT / "alembic").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    ]
    expected += [f"app/demo/{p.name}" for p in (ROOT / "app" / "demo").glob("*.yaml")]
    assert "app/templates/base.html" in expected and "app/alembic/env.py" in expected
    assert sorted(set(expected) - names) == []
    assert not [n for n in names if n.startswith("tests/") or "__pycache__" in n]


def test_the_installed_wheel_serves_the_demo_from_another_directory(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    # The server's dependencies only (no extras: a board needs no torch), by this pip into that venv;
    # pip's cache keeps it local, and skipping .pyc compilation halves the time.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--quiet",
            "--no-compile",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        # Not this checkout's path: its campaign_board.egg-info (from `pip install -e`) would make pip take the
        # wheel's project as already installed and skip it.
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert done.returncode == 0, done.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PYTHONPATH": "", "VIRTUAL_ENV": str(venv), "CAMPAIGN_LOG_LEVEL": "info"}
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import app; print(app.__file__)"],
        cwd=elsewhere,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout  # the installed package, not this checkout

    server = start_live_server(
        tmp_path,
        f"sqlite:///{tmp_path / 'board.db'}",
        "--demo",
        "--no-runner",
        env=env,
        command=[str(venv / "bin" / "campaign")],
        cwd=elsewhere,
    )
    try:
        with httpx.Client(base_url=server.url, timeout=30) as browser:
            page = browser.get(server.login_url, follow_redirects=True)
            assert page.status_code == 200, page.text
            assert "Kimi-K2.5 + EAGLE-3 on 8x RTX PRO 6000 (PCIe)" in page.text  # a demo campaign, from app/demo/
            assets = re.findall(r'(?:href|src)="(/static/v/[0-9a-f]{12}/[^"]+)"', page.text)
            assert {a.split("/", 4)[4] for a in assets} >= {"app.css", "vendor/htmx-2.0.11.min.js", "favicon.svg"}
            for asset in assets:  # the installed package's files, under their versioned URLs
                assert browser.get(asset).status_code == 200, asset
            charts = browser.get("/campaigns/kimi-k25-eagle3/charts").text
            plotly_js = re.search(r'src="(/static/v/[0-9a-f]{12}/vendor/plotly-cartesian-[0-9.]+\.min\.js)"', charts)
            assert plotly_js and browser.get(plotly_js.group(1)).status_code == 200, charts[:2000]
        _installed_runner_uses_the_nodes_torch(server, venv, elsewhere, {**env, "XDG_CACHE_HOME": str(tmp_path)})
    finally:
        stop_live_server(server)
    log = server.log.read_text()
    assert "INFO app.cli: serving on 127.0.0.1" in log, log  # CAMPAIGN_LOG_LEVEL=info reaches app/ loggers

    runner = subprocess.run(
        [str(venv / "bin" / "campaign"), "runner", "--help"],
        cwd=elsewhere,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert runner.returncode == 0, runner.stderr
    assert "--server" in runner.stdout


def _installed_runner_uses_the_nodes_torch(server, venv: Path, cwd: Path, env: dict[str, str]) -> None:
    """The runner from its own venv (no torch there), its recipes on this interpreter (the "node's", with
    torch): it says so at start and connects; a recipe's PYTHONPATH shows the node only `runners`."""
    assert subprocess.run([str(venv / "bin" / "python"), "-c", "import torch"], capture_output=True).returncode != 0
    token = server.cli("runners", "create", "gpu-node-1").stdout.strip()
    log_path = cwd / "runner.log"
    with open(log_path, "w") as log:
        runner = subprocess.Popen(
            [str(venv / "bin" / "campaign"), "runner", "--server", server.url, "--python", sys.executable],
            cwd=cwd,
            env={**os.environ, **env, "CAMPAIGN_RUNNER_TOKEN": token, "CAMPAIGN_DATA_DIR": str(cwd / "data")},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        for _ in range(1200):
            if "campaign.runner: connected to" in log_path.read_text() or runner.poll() is not None:
                break
            time.sleep(0.05)
    finally:
        runner.terminate()
        runner.wait(timeout=60)
    said = log_path.read_text()
    torch_version = importlib.metadata.version("torch")
    assert f"recipes run with {sys.executable}, Python {platform.python_version()}: torch {torch_version}" in said, said
    assert "campaign.runner: connected to" in said, said
    code = (
        "import os; from runners.recipes import build_launch; "
        "print(build_launch({'kind': 'draft_step', 'params': {}}).env['PYTHONPATH'].split(os.pathsep)[0])"
    )
    entry = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert sorted(os.listdir(entry)) == ["app", "runners"]
    assert Path(entry, "runners").resolve().is_relative_to(venv.resolve())  # the installed package
    assert Path(entry, "app").resolve().is_relative_to(venv.resolve())  # for app.protocol, its vocabulary
    found = subprocess.run(
        [
            sys.executable,
            "-c",
            "import runners, app.protocol.metrics, pydantic; print(runners.__file__); print(pydantic.__file__)",
        ],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": entry},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert Path(found[0]).resolve().is_relative_to(venv.resolve())
    assert not Path(found[1]).resolve().is_relative_to(venv.resolve())  # the node's own pydantic, not the runner's


def _third_party_imports(root: Path) -> set[str]:
    found = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return (
        found
        - set(sys.stdlib_module_names)
        - {"app", "runners"}
        - OPTIONAL_IMPORTS
        - NODE_SGLANG_IMPORTS
        - NODE_TORCH_IMPORTS
    )


def test_the_runner_extra_brings_what_runners_and_recipes_import(wheel):
    metadata = zipfile.ZipFile(wheel).read("campaign_board-0.1.0.dist-info/METADATA").decode()
    requirements = [
        Requirement(line.split(":", 1)[1].strip())
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:")
    ]
    runner = {
        r.name.lower(): str(r.specifier) for r in requirements if r.marker and r.marker.evaluate({"extra": "runner"})
    }
    # A range, never a pin: a node's torch is not the board's to replace (CI pins it in the Makefile).
    assert runner["torch"].startswith(">=") and "==" not in runner["torch"]
    assert "numpy" in runner  # torch warns at import without NumPy
    # Names compared as PEP 503 spells them (prometheus-client's import names its distribution prometheus_client).
    provided = {
        canonicalize_name(r.name) for r in requirements if not r.marker or r.marker.evaluate({"extra": "runner"})
    }
    distributions = importlib.metadata.packages_distributions()
    for module in _third_party_imports(ROOT / "runners"):
        dists = {canonicalize_name(d) for d in distributions.get(module, [])}
        assert dists & provided, f"runners/ imports {module} (from {dists or 'nowhere'}): not in the runner extra"


def test_torch_imports_without_the_numpy_warning():
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", "import torch; print(torch.zeros(2).numpy().sum())"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and done.stdout.strip() == "0.0", done.stderr
    assert "NumPy" not in done.stderr
