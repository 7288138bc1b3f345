"""In Chromium: a torch recipe's first lines are on the trial page before its `import torch` has ended.

The recipe (draft_step on CPU, the real one with the real torch) runs with a `sitecustomize` on its
PYTHONPATH that holds every `import torch` at a gate until the test opens it, and notes when the import
reached the gate. So the order is certain, whatever the machine's speed: while the recipe is inside
the import, the page already shows the runner's line (what it started, with which interpreter) and the
phase "importing torch"; only after the gate opens come the "torch ... imported in" line and the
phase "running"."""

from __future__ import annotations

import sys
import textwrap

import pytest

from app.db import make_engine, session_scope
from app.domain.logins import create_login_token
from runners.process import STARTED_PREFIX
from tests.support.browser import start_next_trial
from tests.support.servers import start_live_server, stop_live_server
from tests.support.trials import seed_campaign

pytestmark = pytest.mark.browser

GATE = """\
import importlib.abc, os, sys, time

class TorchGate(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            open(REACHED, "w").close()
            while not os.path.exists(OPEN):
                time.sleep(0.02)
        return None  # the real finders import it

sys.meta_path.insert(0, TorchGate())
"""

TINY_DRAFT_STEP = {
    "device": "cpu",
    "dtype": "fp32",
    "hidden_size": 64,
    "vocab_size": 128,
    "ffn_size": 128,
    "heads": 4,
    "context_len": 16,
    "warmup": 1,
    "iters": 2,
    "calls": 1,
}


def test_a_torch_recipes_first_line_is_on_the_page_before_its_import_ends(tmp_path, browser):
    gate_dir, reached, opened = tmp_path / "gate", tmp_path / "reached", tmp_path / "open"
    gate_dir.mkdir()
    (gate_dir / "sitecustomize.py").write_text(
        textwrap.dedent(GATE).replace("REACHED", repr(str(reached))).replace("OPEN", repr(str(opened)))
    )
    recipe = {"kind": "draft_step", "params": TINY_DRAFT_STEP, "env": {"PYTHONPATH": str(gate_dir)}, "timeout_s": 300}
    db_url = f"sqlite:///{tmp_path / 'e2e.db'}"
    server = start_live_server(tmp_path, db_url)  # with its embedded runner
    engine = make_engine(db_url)
    page = browser.new_page()
    try:
        seed_campaign(engine, "first", [{"key": "draft", "title": "Draft step on CPU", "recipe": recipe}])
        with session_scope(engine) as session:
            token = create_login_token(session, 600)
        page.goto(f"{server.url}/login?token={token}")
        page.goto(f"{server.url}/campaigns/first")
        start_next_trial(page)
        page.click("#run-next-result a")

        page.wait_for_selector(f"#log:has-text('{STARTED_PREFIX}started pid')", timeout=60000)
        page.wait_for_selector("[data-live=phase]:has-text('importing torch')", timeout=60000)
        for _ in range(1500):  # the recipe is inside `import torch`, held at the gate
            if reached.exists():
                break
            page.wait_for_timeout(20)
        assert reached.exists() and not opened.exists()
        first = page.inner_text("#log").splitlines()[0]
        assert first.startswith(f"{STARTED_PREFIX}started pid ")
        assert f": {sys.executable} -m runners.recipes.draft_step " in first and "--device=cpu" in first
        assert "imported in" not in page.inner_text("#log")
        page.wait_for_selector("[data-live=state] [data-state=running]")  # still inside the import: the gate is shut
        assert not opened.exists() and "imported in" not in page.inner_text("#log")

        opened.write_text("open")
        page.wait_for_selector("#log:has-text('imported in')", timeout=120000)
        lines = [line for line in page.inner_text("#log").splitlines() if line]
        assert lines[0] == first and lines[1].startswith("torch ") and " imported in " in lines[1]
        # The phase after the import; the trial may have ended meanwhile (then the phase is cleared).
        page.wait_for_function(
            "() => { const p = document.querySelector('[data-live=phase]');"
            " return !p || p.textContent.trim() !== 'importing torch'; }",
            timeout=60000,
        )
        page.wait_for_selector("[data-live=state] [data-state]:not([data-state=running])", timeout=120000)
    finally:
        page.close()
        engine.dispose()
        stop_live_server(server)
