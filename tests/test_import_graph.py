"""The import graph stays plain: no `import` inside a function in app/ or runners/ unless it is listed below
with its reason, and no import cycle in app/ or runners/ (TYPE_CHECKING imports included). Read with ast,
nothing imported."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Imported at call time anywhere: heavy, and only on a GPU node (or only under the node's sglang python).
HEAVY_OPTIONAL = {"torch", "triton", "sglang", "flashinfer", "pynvml"}

# (file, imported module) -> why it is imported inside a function. "*": every import in that file.
ALLOWED: dict[tuple[str, str], str] = {
    **{
        (f"app/cli/{group}.py", "*"): "each subcommand imports what it runs: `campaign runner` on a GPU node and "
        "`campaign --help` start without loading the web app, the database layer or plotly"
        for group in ("answer", "board", "campaigns", "common", "notify", "replay", "runners", "trials", "users")
    },
    ("app/domain/statistics.py", "scipy"): "scipy.stats at first use: half a second of import every server, page "
    "worker and CLI process would otherwise pay before it needs an interval (docs/performance.md)",
    ("app/domain/statistics.py", "scipy.special"): "as scipy.stats: ndtr at first use",
    ("app/domain/changes.py", "otava.analysis"): "Otava imports scipy.stats: at first use, as statistics.py's scipy",
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


def module_import_graph(root: Path, tops: tuple[str, ...] = ("app", "runners")) -> dict[str, set[str]]:
    """Every module of `tops` -> the modules of `tops` it imports, at any depth of the file, TYPE_CHECKING imports
    included (`from pkg import name` counts pkg.name when it is a module, else pkg)."""
    files: dict[str, Path] = {}
    for top in tops:
        for path in root.joinpath(top).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def known(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                deps |= {m for alias in node.names if (m := known(alias.name))}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if (m := full if full in files else known(base)) is not None:
                        deps.add(m)
        graph[module] = deps - {module}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            group = []
            while (top := stack.pop()) != node:
                group.append(top)
            if group:
                found.append(frozenset([node, *group]))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_in_app_or_runners():
    """app/state.py names the classes of what it holds (TYPE_CHECKING); those live in leaf modules (the page
    events' vocabulary, the page feed, the access watch, the worker pool), apart from the code that reaches the
    state through app_state (issue 46 item 2)."""
    graph = module_import_graph(ROOT)
    assert "runners.preflight.checks" in graph and "app.state" in graph
    assert "app.services.page_feed" in graph["app.state"]  # the check sees TYPE_CHECKING imports
    assert import_cycles(graph) == [], "an import cycle (TYPE_CHECKING imports count)"


def test_the_whole_tree_cycle_check_can_fail(tmp_path):
    pkg = tmp_path / "app" / "services"
    pkg.mkdir(parents=True)
    (tmp_path / "app" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from app.services.b import B\n")
    (pkg / "b.py").write_text("from . import a\n")
    (pkg / "c.py").write_text("import app.services.a\n")
    assert import_cycles(module_import_graph(tmp_path, ("app",))) == [frozenset({"app.services.a", "app.services.b"})]


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


# What the server and the runner share lives in app/protocol/ (messages, metric lines and names, condition tags,
# the preflight line, SGLang's output formats, the recipe error, log levels, the trace): both sides import it.
SHARED = "app.protocol"
# The runner is installed on GPU nodes without the server: of app/ it may import only these.
RUNNER_MAY_IMPORT = {
    "app": "the version (app.__version__)",
    SHARED: "the vocabulary both sides share (standard library only, but for the messages' pydantic)",
}
# The server's files that may import runners/ (anything else takes the shared words from app.protocol).
SERVER_MAY_IMPORT_RUNNERS = {
    "app/cli/runners.py": "`campaign runner` and `campaign preflight` run the runner's own code on the node",
    "app/services/lifespan.py": "starts and stops the embedded runner",
    "app/schemas.py": "a recipe is validated by the runner's own `build_launch` and its registry of kinds, "
    "so the board refuses exactly what a runner would (the kinds' validators are runner code)",
}


def imports_of(paths: list[Path], package: str) -> dict[str, list[str]]:
    """module of `package` imported -> the files importing it (any import statement, at any depth)."""
    found: dict[str, list[str]] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = (
                    [node.module]
                    if node.module != package
                    else [f"{package}.{a.name}" if a.name != "__version__" else package for a in node.names]
                )
            for name in names:
                if name == package or name.startswith(package + "."):
                    found.setdefault(name, []).append(path.as_posix())
    return found


def app_imports_of(paths: list[Path]) -> dict[str, list[str]]:
    return imports_of(paths, "app")


def _shared(module: str) -> bool:
    return module == SHARED or module.startswith(SHARED + ".")


def test_runners_import_nothing_of_the_server_but_the_shared_package_and_the_version():
    imported = app_imports_of(sorted(ROOT.joinpath("runners").rglob("*.py")))
    assert "app.protocol.messages" in imported and "app.protocol.metrics" in imported  # the check sees them
    assert {m: files for m, files in imported.items() if m not in RUNNER_MAY_IMPORT and not _shared(m)} == {}


def test_the_server_imports_nothing_of_the_runner_but_from_its_entry_points():
    app_files = sorted(ROOT.joinpath("app").rglob("*.py"))
    importing = {
        Path(f).relative_to(ROOT).as_posix() for files in imports_of(app_files, "runners").values() for f in files
    }
    assert "app/services/lifespan.py" in importing  # the check sees the server's imports
    assert importing - set(SERVER_MAY_IMPORT_RUNNERS) == set()
    assert set(SERVER_MAY_IMPORT_RUNNERS) <= importing  # an entry whose import is gone is removed


def test_the_shared_package_imports_neither_side():
    """app/protocol/ is the bottom: it imports no other module of app/ and nothing of runners/."""
    paths = sorted(ROOT.joinpath("app", "protocol").rglob("*.py"))
    assert {m for m in app_imports_of(paths) if not _shared(m)} == set()
    assert imports_of(paths, "runners") == {}


def test_the_shared_package_needs_no_third_party_package_but_pydantic_for_its_messages():
    """Recipes import app.protocol under a GPU node's own python, which may have nothing but torch."""
    third_party: dict[str, set[str]] = {}
    for path in sorted(ROOT.joinpath("app", "protocol").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                tops = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = {node.module.split(".")[0]}
            else:
                continue
            extra = tops - set(sys.stdlib_module_names) - {"app", "__future__"}
            if extra:
                third_party.setdefault(path.name, set()).update(extra)
    assert third_party == {"messages.py": {"pydantic"}}


def test_the_import_checks_can_fail(tmp_path):
    (tmp_path / "a.py").write_text("from app.domain import trials\nfrom app import __version__\n")
    (tmp_path / "b.py").write_text("def f():\n    import app.db\n")
    found = app_imports_of([tmp_path / "a.py", tmp_path / "b.py"])
    assert set(found) == {"app.domain", "app", "app.db"}
    (tmp_path / "c.py").write_text("from runners import recipes\nfrom runners.recipes.command import RECIPE\n")
    assert set(imports_of([tmp_path / "c.py"], "runners")) == {"runners.recipes", "runners.recipes.command"}
    assert not _shared("app.protocolx") and _shared("app.protocol.metrics")


def test_the_domain_imports_nothing_of_the_web_side():
    """app/domain is below security, web and api: it imports none of them (credentials: app/domain/credentials.py)."""
    imported = app_imports_of(sorted(ROOT.joinpath("app", "domain").rglob("*.py")))
    assert "app.models" in imported  # the check sees the domain's imports
    upward = ("app.security", "app.web", "app.api")
    assert {m: f for m, f in imported.items() if any(m == u or m.startswith(u + ".") for u in upward)} == {}
