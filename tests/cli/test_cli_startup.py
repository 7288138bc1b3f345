"""What `campaign serve` (and so `make run`) prints while it starts: the login link in a framed block once the
server listens, repeated after the embedded runner and the page workers have said they are up, so the link
is the last thing on screen; and the Makefile's install that shows its progress and pins CI's torch."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

from app.cli.board import login_block
from app.config import Settings
from tests.support.paths import ROOT
from tests.support.servers import start_live_server, stop_live_server

RULE = re.compile(r"^=+$")


def _blocks(lines: list[str]) -> list[tuple[int, list[str]]]:
    """(index of the opening rule, the block's lines between its rules) for each framed block."""
    found, start = [], None
    for i, line in enumerate(lines):
        if RULE.match(line):
            if start is None:
                start = i
            else:
                found.append((start, lines[start + 1 : i]))
                start = None
    return found


def test_the_login_block_frames_the_link_alone_on_its_line(tmp_path):
    settings = Settings(data_dir=tmp_path, port=8123, login_token_ttl_s=900)
    link = "http://127.0.0.1:8123/login?token=login_abc"
    text = login_block(link, "Log in as ada", settings)
    lines = text.splitlines()
    assert RULE.match(lines[0]) and lines[-1] == lines[0] and len(lines[0]) >= len(link) + 4
    assert lines[1:-1] == [
        "  Campaign Board is ready on http://127.0.0.1:8123",
        "  Log in as ada (one-time link, valid 15 min):",
        "",
        f"  {link}",
    ]
    hours = login_block(link, "Log in as ada", Settings(data_dir=tmp_path, login_token_ttl_s=24 * 3600))
    assert "(one-time link, valid 24 h):" in hours


def test_serve_prints_the_block_when_ready_and_again_after_the_start_up_lines(tmp_path):
    server = start_live_server(tmp_path, f"sqlite:///{tmp_path / 'board.db'}", "--workers", "1", first_login_done=False)
    try:
        for _ in range(600):  # the second block comes once the runner and the page worker are up
            lines = server.log.read_text().splitlines()
            if len(_blocks(lines)) >= 2:
                break
            time.sleep(0.1)
        (ready_at, first), (again_at, second) = _blocks(lines)[:2]
        assert first == second
        link = first[-1].strip()
        assert link.startswith(f"{server.url}/login?token=") and link == server.login_url
        serving = next(i for i, line in enumerate(lines) if line.startswith(f"Campaign Board on {server.url}"))
        connected = next(i for i, line in enumerate(lines) if "campaign.runner: connected to" in line)
        workers = next(i for i, line in enumerate(lines) if "page workers: 1 of 1 ready" in line)
        recipes = next(i for i, line in enumerate(lines) if "campaign.runner: recipes run with" in line)
        assert serving < ready_at < again_at
        assert max(connected, workers, recipes) < again_at  # the repeat comes after every start-up line
        # The link works (once).
        with httpx.Client(base_url=server.url) as client:
            assert client.get(link, follow_redirects=True).status_code == 200
    finally:
        stop_live_server(server)


def test_make_install_shows_its_steps_and_pins_torch_in_the_same_pip_install_as_the_extras(tmp_path):
    venv = tmp_path / "venv"
    plan = subprocess.run(
        ["make", "-n", "-B", "install", f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    steps = [line for line in plan if line.startswith('echo "==> [')]
    assert [s.split("]")[0] for s in steps] == ['echo "==> [1/3', 'echo "==> [2/3', 'echo "==> [3/3']
    installs = [line for line in plan if line.startswith(f"{venv}/bin/pip install")]
    assert installs and not any("--quiet" in line or " -q" in line for line in installs)  # pip shows its progress
    (extras,) = [line for line in installs if ".[runner,dev]" in line]
    assert "'torch==2.13.0'" in extras  # CI's exact torch, resolved together with the extras
    pyproject = (ROOT / "pyproject.toml").read_text()
    runner_extra = re.search(r"^runner = \[.*\]$", pyproject, re.M)
    assert runner_extra and "torch>=" in runner_extra.group(0) and "torch==" not in runner_extra.group(0)  # a range


def test_readme_attaches_a_node_with_the_runner_in_its_own_venv():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Attach a GPU node", 1)[1].split("\n## ", 1)[0]
    assert "python3 -m venv" in section and "--python" in section
    assert "[runner]" not in section.split("```sh", 1)[1].split("```", 1)[0]  # the first recipe installs no torch
    assert Path(ROOT / "Makefile").read_text().count("torch==") == 1


def test_importing_the_app_leaves_scipy_stats_and_otava_for_first_use():
    # Every server, page worker and CLI process imports app.main; scipy.stats (through statistics.py and Otava)
    # is half a second of that, paid only once an interval or a change-point scan is needed.
    code = "import sys, app.main; print(sorted(m for m in sys.modules if m.startswith(('scipy.stats', 'otava'))))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    # ... and the first use imports them: an interval still comes out.
    from app.domain import statistics

    assert 2.7 < statistics._difference_quantile(100, 0.95) < 2.9  # z(0.975) * sqrt(2 * 100 / 98)
