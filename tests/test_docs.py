"""Documentation that must not drift: every setting is described and listed in docs/configuration.md."""

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


def test_architecture_names_every_module():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    modules = sorted(p.relative_to(ROOT).as_posix() for top in ("app", "runners") for p in (ROOT / top).rglob("*.py"))
    assert "app/domain/trials.py" in modules
    missing = [m for m in modules if f"`{m}`" not in doc]
    assert missing == [], f"docs/architecture.md does not name {missing}"


def test_readme_counts_the_kimi_demos_verdicts_and_untested_candidates_as_the_demo_file_has_them():
    import yaml

    approaches = yaml.safe_load((ROOT / "app" / "demo" / "kimi-k25-eagle3.yaml").read_text())["approaches"]
    statuses = [a["status"] for a in approaches]
    words = "no one two three four five six seven eight nine ten eleven twelve".split()
    decided = sum(s != "untested" for s in statuses)
    untested = statuses.count("untested")
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"with its {words[decided]} verdicts and {words[untested]} untested candidates" in readme
