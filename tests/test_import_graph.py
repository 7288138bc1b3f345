"""The import graph stays plain: no `import` inside a function in app/ or runners/ unless it is listed below
with its reason, and no import cycle among the app.domain modules. Read with ast, nothing imported."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Imported at call time anywhere: heavy, and only on a GPU node (or only under the node's sglang python).
HEAVY_OPTIONAL = {"torch", "sglang", "flashinfer", "pynvml"}

# (file, imported module) -> why it is imported inside a function. "*": every import in that file.
ALLOWED: dict[tuple[str, str], str] = {
    ("app/cli.py", "*"): "each subcommand imports what it runs: `campaign runner` on a GPU node and "
    "`campaign --help` start without loading the web app, the database layer or plotly",
    ("runners/preflight/checks.py", "runners.recipes.sglang_server"): "sglang_server runs the preflight "
    "checks (it imports runners.preflight, which registers these checks on import): a cycle",
    ("runners/recipes/engine_acceptance.py", "prometheus_client.parser"): "the recipe runs with the node's "
    "engine python, which may lack prometheus_client: a missing one is a clear refusal (exit 2), not an ImportError",
}


def function_local_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import statement inside a function or method of this file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Import):
                found += [(node.lineno, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                found.append((node.lineno, "." * node.level + (node.module or "")))
    return sorted(set(found))


def unexplained_local_imports(root: Path, paths: list[Path]) -> list[str]:
    bad = []
    for path in paths:
        rel = path.relative_to(root).as_posix()
        for line, module in function_local_imports(path):
            if module.split(".")[0] in HEAVY_OPTIONAL:
                continue
            if (rel, "*") in ALLOWED or (rel, module) in ALLOWED:
                continue
            bad.append(f"{rel}:{line} imports {module} inside a function")
    return bad


def domain_import_graph(domain_dir: Path) -> dict[str, set[str]]:
    """app.domain module -> the app.domain modules it imports (at any depth of the file)."""
    names = {p.stem for p in domain_dir.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for name in names:
        tree = ast.parse((domain_dir / f"{name}.py").read_text(encoding="utf-8"))
        deps: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("app.domain."):
                        deps.add(alias.name.split(".")[2])
            elif isinstance(node, ast.ImportFrom) and node.module:
                if node.module == "app.domain":  # from app.domain import trials, verdicts
                    deps |= {alias.name for alias in node.names if alias.name in names}
                elif node.module.startswith("app.domain."):
                    deps.add(node.module.split(".")[2])
        graph[name] = (deps & names) - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return path[path.index(dep) :] + [dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_unexplained_function_local_imports():
    paths = sorted([*ROOT.joinpath("app").rglob("*.py"), *ROOT.joinpath("runners").rglob("*.py")])
    assert paths
    assert unexplained_local_imports(ROOT, paths) == []


def test_every_allowed_local_import_is_still_there():
    """An allow-list entry whose import is gone is removed, so the list keeps saying why each one exists."""
    for (rel, module), _reason in ALLOWED.items():
        imports = [m for _, m in function_local_imports(ROOT / rel)]
        assert imports, rel
        assert module == "*" or module in imports, (rel, module)


def test_no_import_cycle_among_domain_modules():
    graph = domain_import_graph(ROOT / "app" / "domain")
    assert {"scheduling", "trials", "verdicts", "runners"} <= set(graph)
    assert find_cycle(graph) is None


def test_the_checks_can_fail(tmp_path):
    """The two checks find what they look for (on a made-up tree)."""
    domain = tmp_path / "app" / "domain"
    domain.mkdir(parents=True)
    (domain / "a.py").write_text("from app.domain import b\n")
    (domain / "b.py").write_text("def f():\n    from app.domain.c import g\n")
    (domain / "c.py").write_text("import app.domain.a\n")
    assert find_cycle(domain_import_graph(domain)) == ["a", "b", "c", "a"]
    assert function_local_imports(domain / "b.py") == [(2, "app.domain.c")]
    assert unexplained_local_imports(tmp_path, [domain / "b.py"]) == [
        "app/domain/b.py:2 imports app.domain.c inside a function"
    ]
    (domain / "d.py").write_text("def f():\n    import torch.distributed\n")
    assert unexplained_local_imports(tmp_path, [domain / "d.py"]) == []


# The runner is installed on GPU nodes without the server: of app/ it may import only these.
RUNNER_MAY_IMPORT = {
    "app": "the version (app.__version__)",
    "app.protocol": "runner <-> server messages (pydantic only)",
}


def app_imports_of(paths: list[Path]) -> dict[str, list[str]]:
    """module of app imported -> the files importing it (any import statement, at any depth)."""
    found: dict[str, list[str]] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = (
                    [node.module]
                    if node.module != "app"
                    else [f"app.{a.name}" if a.name != "__version__" else "app" for a in node.names]
                )
            for name in names:
                if name == "app" or name.startswith("app."):
                    found.setdefault(name, []).append(path.as_posix())
    return found


def test_runners_import_nothing_of_the_server_but_the_protocol_and_the_version():
    imported = app_imports_of(sorted(ROOT.joinpath("runners").rglob("*.py")))
    assert "app.protocol" in imported  # the check sees the runner's imports
    assert {m: files for m, files in imported.items() if m not in RUNNER_MAY_IMPORT} == {}


def test_the_runner_import_check_can_fail(tmp_path):
    (tmp_path / "a.py").write_text("from app.domain import trials\nfrom app import __version__\n")
    (tmp_path / "b.py").write_text("def f():\n    import app.db\n")
    found = app_imports_of([tmp_path / "a.py", tmp_path / "b.py"])
    assert set(found) == {"app.domain", "app", "app.db"}


def test_the_domain_imports_nothing_of_the_web_side():
    """app/domain is below security, web and api: it imports none of them (credentials: app/domain/credentials.py)."""
    imported = app_imports_of(sorted(ROOT.joinpath("app", "domain").rglob("*.py")))
    assert "app.models" in imported  # the check sees the domain's imports
    upward = ("app.security", "app.web", "app.api")
    assert {m: f for m, f in imported.items() if any(m == u or m.startswith(u + ".") for u in upward)} == {}
