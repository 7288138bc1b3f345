"""Documentation that must not drift: every setting is described and listed in docs/configuration.md."""

import re
from pathlib import Path

from app.config import Settings

ROOT = Path(__file__).resolve().parent.parent


def test_every_setting_is_documented():
    doc = (ROOT / "docs" / "configuration.md").read_text()
    for name, field in Settings.model_fields.items():
        assert field.description, f"Settings.{name} has no description"
        assert f"`CAMPAIGN_{name.upper()}`" in doc, f"CAMPAIGN_{name.upper()} is missing from docs/configuration.md"


def test_readme_names_the_two_commands_that_ci_runs():
    readme = (ROOT / "README.md").read_text()
    assert "make run" in readme and "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_the_module_index_names_every_module():
    """docs/modules.md (linked from docs/architecture.md) has a line for every module of app/ and runners/."""
    doc = (ROOT / "docs" / "modules.md").read_text()
    assert "(modules.md)" in (ROOT / "docs" / "architecture.md").read_text()
    modules = sorted(p.relative_to(ROOT).as_posix() for top in ("app", "runners") for p in (ROOT / top).rglob("*.py"))
    assert "app/domain/trials.py" in modules
    missing = [m for m in modules if f"`{m}`" not in doc]
    assert missing == [], f"docs/modules.md does not name {missing}"


def test_readme_counts_the_kimi_demo_as_the_board_shows_it():
    """The README's counts come from the demo file: its verdicts (every status but untested, by status) and
    its untested approaches, those added after the seed's first day being the candidates found since."""
    import yaml

    from app.models import ApproachStatus

    demo = yaml.safe_load((ROOT / "app" / "demo" / "kimi-k25-eagle3.yaml").read_text())
    approaches = demo["approaches"]
    words = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine"}
    by_status = {str(s): sum(a["status"] == s for a in approaches) for s in ApproachStatus}
    untested = [a for a in approaches if a["status"] == ApproachStatus.untested]
    first_day = min(a["history"][0]["at"][:10] for a in approaches)
    later = [a for a in untested if a["history"][0]["at"][:10] > first_day]
    verdicts = len(approaches) - len(untested)
    assert verdicts == by_status["dead_end"] + by_status["deferred"]  # the phrase names every verdict status
    phrase = (
        f"the Kimi-K2.5 + EAGLE-3 campaign with its {words[verdicts]} verdicts ({words[by_status['dead_end']]} "
        f"dead ends, {words[by_status['deferred']]} deferred) and {words[len(untested)]} untested approaches, "
        f"{words[len(later)]} of them candidates found since"
    )
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert phrase in readme


def test_architecture_stays_short_with_short_table_cells():
    """docs/architecture.md is read in ten minutes: the file stays under a size bound, and every Markdown table
    cell of it and of its module index (lines starting with '|', split on unescaped '|') holds at most 200
    characters."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    assert len(doc) < 25_000, f"docs/architecture.md has {len(doc)} characters"
    doc += (ROOT / "docs" / "modules.md").read_text()
    cells = [
        cell.strip()
        for line in doc.splitlines()
        if line.startswith("|")
        for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))
    ]
    assert len(cells) > 100  # the layers, concepts and module index are tables
    long = [cell for cell in cells if len(cell) > 200]
    assert long == [], f"table cells over 200 characters: {long}"
