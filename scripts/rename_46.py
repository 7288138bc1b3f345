#!/usr/bin/env python3
"""Issue 46 item 5, "names that say where things are": the renames as one script, run once on main after the
merges, then deleted. Idempotent (a second run changes nothing) and robust to other edits: it works on whatever
tree it finds and prints each file it changed with what it renamed.

    .venv/bin/python scripts/rename_46.py            # rename, then ruff's import sort and format on the files
    .venv/bin/python scripts/rename_46.py --dry-run  # say what would change, write nothing

What it does (the table of meanings is docs/architecture.md's Glossary):
1. `git mv` of modules named for what they hold (MOVES), and of their test modules.
2. Dotted and slashed paths of those modules rewritten in every text file (imports, monkeypatch strings, docs).
3. `from app.domain import inventory` users: the module's local name follows (`inventory.x` -> `campaigns.x`),
   refused for a file that already uses the new name.
4. Python identifiers renamed as NAME tokens only (tokenize), never inside strings, so URLs, JSON keys, CSS
   classes, database columns and user-facing words stay; the same names in comments, docstrings, templates
   and docs follow where they can only mean the identifier.
Public surfaces never renamed: URLs (/campaigns/{slug}/inventory), JSON keys (verdict, tier_verdicts,
no_verdict_reason), enum values (no_verdict), the preflight line's "verdict" key and stored proposals' key,
database columns (verdict_fingerprint, change_points.verdict), notification events (verdict.waiting), CSS.
"""

from __future__ import annotations

import argparse
import io
import re
import shutil
import subprocess
import sys
import tokenize
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREES = ("app", "runners", "tests", "bench", "scripts", "templates", "docs", "static", "alembic")
TOP_FILES = ("README.md", "Makefile", "pyproject.toml")
TEXT_SUFFIXES = {".py", ".html", ".md", ".toml", ".js", ".css", ".sh", ".yaml", ".yml", ".ini", ".cfg", ".txt", ""}
SELF = {"scripts/rename_46.py", "scripts/rename-46.sh"}

# Modules renamed to what they hold (old -> new). wording.py's two helpers are counts and sizes with their
# units ("3 trials", "56 KiB"); domain, charts, CLI and templates all use them, so they stay one leaf module.
MOVES = {
    "app/domain/inventory.py": "app/domain/campaigns.py",
    "app/domain/wording.py": "app/domain/units.py",
    "tests/domain/test_inventory.py": "tests/domain/test_campaigns.py",
    "tests/domain/test_wording.py": "tests/domain/test_units.py",
}
# Module objects imported by name (`from app.domain import inventory`): their local name follows.
MODULE_NAMES = {"inventory": "campaigns"}

# One word per meaning of the old "verdict" (kept only for a person's decision on an approach):
#   a comparison's statistical label (faster, slower, equivalent, ...)        -> finding
#   the batch-1 report's "does speculation pay" for one approach              -> break-even (ApproachBreakEven)
#   the statuses a failure signature or a preflight failure may propose        -> proposable statuses
#   a prediction checked against a measurement                                 -> holds
# NAME tokens renamed in every Python file (each has one meaning wherever it appears).
NAMES = {
    "Verdict": "Finding",  # app.domain.statistics' enum; its values (no_verdict included) are public, kept
    "VERDICT_WORDS": "FINDING_WORDS",
    "PairVerdict": "PairFinding",
    "TierVerdict": "TierFinding",  # TierVerdictPublic is an OpenAPI component name: kept
    "VerdictValue": "FindingValue",
    "why_no_verdict": "why_no_finding",  # the API's key stays no_verdict_reason
    "NO_VERDICT": "NO_FINDING",
    "VERDICT_SPANS": "FINDING_SPANS",
    "_verdict_cell": "_finding_cell",
    "VERDICT_COLORS": "FINDING_COLORS",
    "verdict_words": "finding_words",
    "ApproachVerdict": "ApproachBreakEven",
}


def _imports_preflight_verdicts(path: str, text: str) -> bool:
    return path == "app/protocol/preflight.py" or bool(
        re.search(r"from app\.protocol\.preflight import [^\n]*\bVERDICTS\b", text)
    )


# NAME tokens renamed only where the predicate holds (the same name means something else elsewhere).
SCOPED: list[tuple[str, str, Callable[[str, str], bool]]] = [
    # app/domain/search.py's verdict_of maps a person's verdict (a status change) to its approach: kept
    ("verdict_of", "finding_of", lambda path, text: path != "app/domain/search.py"),
    # app/domain/replay.py's VERDICTS are a person's decided statuses: kept
    ("VERDICTS", "PROPOSABLE_STATUSES", _imports_preflight_verdicts),
    ("_verdict", "_holds", lambda path, text: path == "app/domain/answer/prediction.py"),
]

# In prose (comments, docstrings, templates, docs): only forms that can only mean the identifier.
PROSE = [(rf"\b{re.escape(old)}\b", new) for old, new in NAMES.items() if old not in ("Verdict", "NO_VERDICT")]
PROSE += [
    (r"\bstatistics\.Verdict\b", "statistics.Finding"),
    (r"\bstatistics\.verdict_of\b", "statistics.finding_of"),
    (r"\bverdict_of\b(?=\))", "finding_of"),  # "(statistics.verdict_of)" wrapped as "(verdict_of)"
]


def _paths_prose() -> list[tuple[str, str]]:
    """Dotted and slashed module paths, in any text file."""
    out = []
    for old, new in MOVES.items():
        out.append((rf"\b{re.escape(old)}\b", new))
        if old.startswith("app/"):
            dotted_old, dotted_new = old[:-3].replace("/", "."), new[:-3].replace("/", ".")
            out.append((rf"\b{re.escape(dotted_old)}\b", dotted_new))
    return out


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def move_modules(dry: bool) -> list[str]:
    done = []
    for old, new in MOVES.items():
        src, dst = ROOT / old, ROOT / new
        if src.exists() and dst.exists():
            sys.exit(f"rename_46: both {old} and {new} exist: merge them by hand, then run again")
        if src.exists():
            done.append(f"git mv {old} {new}")
            if not dry:
                git("mv", old, new)
    return done


def text_files() -> list[Path]:
    tracked = git("ls-files", *TREES, *TOP_FILES).splitlines()
    files = []
    for name in tracked:
        path = ROOT / name
        if name in SELF or not path.is_file() or path.suffix not in TEXT_SUFFIXES:
            continue
        if path.suffix == "" and not path.read_bytes()[:64].startswith(b"#!"):
            continue
        files.append(path)
    return files


def is_python(path: Path, text: str) -> bool:
    return path.suffix == ".py" or (path.suffix == "" and text.startswith("#!") and "python" in text.split("\n", 1)[0])


def _sub_all(pairs: list[tuple[str, str]], text: str, counts: Counter[str]) -> str:
    for pattern, new in pairs:
        text, n = re.subn(pattern, new, text)
        if n:
            counts[f"{pattern.replace(chr(92) + 'b', '')} -> {new}"] += n
    return text


def _module_import_names(text: str) -> set[str]:
    """Names of MODULE_NAMES this file imports as modules (`from app.domain import a, inventory`)."""
    found = set()
    for m in re.finditer(r"from app\.domain import (\([^)]*\)|[^\n]*)", text):
        for old in MODULE_NAMES:
            if re.search(rf"\b{old}\b(?! as)", m.group(1)):
                found.add(old)
    return found


def rewrite_python(rel: str, text: str, counts: Counter[str]) -> str:
    names = dict(NAMES)
    names.update({old: new for old, new, applies in SCOPED if applies(rel, text)})
    modules = _module_import_names(text)
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    # a bare name in use: not an attribute (`x.campaigns`), not a module imported under another name
    taken = {
        t.string
        for i, t in enumerate(tokens)
        if t.type == tokenize.NAME
        and not (i > 0 and tokens[i - 1].string == ".")
        and not (i + 1 < len(tokens) and tokens[i + 1].string == "as")
    }
    for old in modules:
        new = MODULE_NAMES[old]
        if new in taken:
            sys.exit(f"rename_46: {rel} imports module {old!r} and already uses the name {new!r}: rename by hand")
        names[old] = new
    prose = PROSE + [(rf"\b{re.escape(o)}\b", n) for o, n, applies in SCOPED if applies(rel, text) and o != "_verdict"]
    lines = re.split(r"(?<=\n)", text)  # tokenize's lines: split on newlines only
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    edits: list[tuple[int, int, str]] = []
    for tok in tokens:
        start = offsets[tok.start[0] - 1] + tok.start[1]
        end = offsets[tok.end[0] - 1] + tok.end[1]
        if tok.type == tokenize.NAME and tok.string in names:
            edits.append((start, end, names[tok.string]))
            counts[f"{tok.string} -> {names[tok.string]}"] += 1
        elif tok.type == tokenize.STRING and tok.string[1:-1] in NAMES and tok.string[0] in "'\"":
            # __all__ entries and template context keys that name the identifier exactly
            edits.append((start, end, tok.string[0] + NAMES[tok.string[1:-1]] + tok.string[-1]))
            counts[f"'{tok.string[1:-1]}' -> '{NAMES[tok.string[1:-1]]}'"] += 1
        elif tok.type in (tokenize.STRING, tokenize.COMMENT):
            new = _sub_all(prose, tok.string, counts)
            if new != tok.string:
                edits.append((start, end, new))
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def rewrite(path: Path, counts: Counter[str]) -> str:
    rel = path.relative_to(ROOT).as_posix()
    text = path.read_text()
    text = _sub_all(_paths_prose(), text, counts)
    if is_python(path, text):
        return rewrite_python(rel, text, counts)
    if path.suffix in (".html", ".md"):
        return _sub_all(PROSE, text, counts)
    for old in _module_import_names(text):  # Python inside a shell script (scripts/screenshot-planning)
        new = MODULE_NAMES[old]
        text = _sub_all([(rf"(?<=from app\.domain import )([^\n]*)\b{old}\b", rf"\g<1>{new}")], text, counts)
        text = _sub_all([(rf"(?<![\w/.-]){old}(?=\.[a-z_]+\()", new)], text, counts)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="say what would change, write nothing")
    args = parser.parse_args()
    for line in move_modules(args.dry_run):
        print(line)
    changed = []
    for path in text_files():
        counts: Counter[str] = Counter()
        before = path.read_text()
        after = rewrite(path, counts)
        if after != before:
            changed.append(path)
            rel = path.relative_to(ROOT).as_posix()
            print(f"{rel}: " + ", ".join(f"{what} x{n}" for what, n in sorted(counts.items())))
            if not args.dry_run:
                path.write_text(after)
    python = [str(p) for p in changed if is_python(p, p.read_text())]
    ruff = ROOT / ".venv/bin/ruff"
    if python and not args.dry_run:
        ruff_cmd = str(ruff) if ruff.exists() else shutil.which("ruff")
        if ruff_cmd:  # import lists re-sorted after a renamed module, lines re-wrapped
            subprocess.run([ruff_cmd, "check", "--fix", "--select", "I", "--quiet", *python], cwd=ROOT, check=False)
            subprocess.run([ruff_cmd, "format", "--quiet", *python], cwd=ROOT, check=False)
    print(f"rename_46: {len(changed)} files {'would change' if args.dry_run else 'changed'}")


if __name__ == "__main__":
    main()
