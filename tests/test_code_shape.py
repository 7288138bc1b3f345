"""The code's shape (issue 46 item 4): no function or method in app/ or runners/ over 80 lines, decorators and
docstring included, so each reads on one screen; a longer one is split into helpers that say what they do.
Read with ast, nothing imported."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 80


def long_functions(paths: list[Path], limit: int = MAX_LINES, root: Path = ROOT) -> list[str]:
    found = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = (node.end_lineno or node.lineno) - start + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root).as_posix()}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_over_80_lines():
    paths = sorted([*ROOT.joinpath("app").rglob("*.py"), *ROOT.joinpath("runners").rglob("*.py")])
    assert len(paths) > 100
    assert long_functions(paths) == []


def test_the_check_sees_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    path = tmp_path / "probe.py"
    path.write_text(f"@staticmethod\ndef long():\n{body}\n", encoding="utf-8")
    assert long_functions([path], root=tmp_path) == ["probe.py:2 long (82 lines)"]
    assert long_functions([path], limit=82, root=tmp_path) == []
