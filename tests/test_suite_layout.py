"""The suite's layout across databases (tests/conftest.py, docs/testing.md): a test runs on SQLite, a test marked
`both_databases` on PostgreSQL too, and CAMPAIGN_TEST_ALL_DATABASES=1 puts every test on both. These tests keep
the mark from silently dropping PostgreSQL coverage: the modules whose behaviour differs per database keep their
PostgreSQL cases, and an unmarked test really runs on SQLite alone (otherwise the mark would decide nothing)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Every case of these modules runs on both databases: each drives code that is written per dialect, or that
# the two databases execute differently (docs/testing.md, "Which tests run on PostgreSQL").
BOTH_DATABASES_MODULES = [
    "tests/test_migrations.py",  # the migrations
    "tests/domain/test_ids_never_reused.py",  # AUTOINCREMENT vs sequences
    "tests/domain/test_search.py",  # FTS5 vs tsvector + GIN
    "tests/web/test_search_pages.py",
    "tests/api/test_trial_filters_api.py",  # the trials page's filters, sorts and pages
    "tests/trials/test_page_queries.py",  # paged lists and query counts
    "tests/charts/test_query_counts.py",
    "tests/trials/test_run_next_concurrency.py",  # locks and claims
    "tests/domain/test_queue.py",
    "tests/domain/test_settle.py",
    "tests/test_db_json.py",  # JSON columns
    "tests/trials/test_log_store.py",  # bulk ingest, unique constraints
    "tests/domain/test_campaign_read_only.py",  # the read-only flush rule
    "tests/domain/test_campaign_files.py",  # import/export round trips
    "tests/notifications/test_outbox.py",  # ON CONFLICT per dialect
]
# A module of the suite that takes a database and carries no mark: its cases run on SQLite alone.
UNMARKED_MODULE = "tests/web/test_pages.py"
# The search is written twice, once per dialect: a test module that imports it is marked as a whole.
DIALECT_SPECIFIC = ("app.domain.search", "app.services.search")


def _collect(*paths: str, all_databases: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CAMPAIGN_TEST_ALL_DATABASES"}
    if all_databases is not None:
        env["CAMPAIGN_TEST_ALL_DATABASES"] = all_databases
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *paths],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def _ids(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return [line for line in result.stdout.splitlines() if "::" in line]


def test_the_marker_is_registered_with_how_to_decide(pytestconfig):
    markers = [line for line in pytestconfig.getini("markers") if line.startswith("both_databases:")]
    assert len(markers) == 1, pytestconfig.getini("markers")
    assert "docs/testing.md" in markers[0]
    assert "CAMPAIGN_TEST_ALL_DATABASES" in (ROOT / "docs" / "testing.md").read_text()


def test_the_database_specific_modules_run_on_postgresql_and_the_rest_on_sqlite_alone():
    ids = _ids(_collect(*BOTH_DATABASES_MODULES, UNMARKED_MODULE))
    postgres = [i for i in ids if "[postgres" in i]
    assert postgres, "no test is collected on PostgreSQL"
    for module in BOTH_DATABASES_MODULES:
        cases = [i for i in ids if i.startswith(module + "::")]
        on_sqlite = {i.replace("[sqlite", "[", 1) for i in cases if "[sqlite" in i}
        on_postgres = {i.replace("[postgres", "[", 1) for i in cases if "[postgres" in i}
        assert on_postgres, f"{module} has no PostgreSQL case"
        assert on_sqlite <= on_postgres, f"{module}: only on SQLite: {sorted(on_sqlite - on_postgres)[:5]}"
    unmarked = [i for i in ids if i.startswith(UNMARKED_MODULE + "::")]
    assert any("[sqlite" in i for i in unmarked), unmarked  # it does take a database
    assert not any("[postgres" in i for i in unmarked), "an unmarked module ran on PostgreSQL"


def test_all_databases_puts_every_test_on_postgresql_too():
    ids = _ids(_collect(UNMARKED_MODULE, all_databases="1"))
    on_sqlite = {i.replace("[sqlite", "[", 1) for i in ids if "[sqlite" in i}
    on_postgres = {i.replace("[postgres", "[", 1) for i in ids if "[postgres" in i}
    assert on_sqlite and on_sqlite == on_postgres


def test_a_bad_all_databases_value_is_refused_by_name():
    result = _collect(UNMARKED_MODULE, all_databases="yes")
    assert result.returncode != 0
    assert "CAMPAIGN_TEST_ALL_DATABASES must be 1" in result.stdout + result.stderr


def _imports(tree: ast.Module) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def _module_marked(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            return "both_databases" in ast.unparse(node.value)
    return False


@pytest.mark.parametrize("module", sorted(BOTH_DATABASES_MODULES))
def test_the_listed_modules_are_marked_as_a_whole(module):
    assert _module_marked(ast.parse((ROOT / module).read_text())), f"{module} has no module-level both_databases"


def test_a_module_importing_dialect_specific_code_is_marked():
    unmarked = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        if _imports(tree) & set(DIALECT_SPECIFIC) and not _module_marked(tree):
            unmarked.append(path.relative_to(ROOT).as_posix())
    assert unmarked == [], f"these import {DIALECT_SPECIFIC} but are not marked both_databases: {unmarked}"
