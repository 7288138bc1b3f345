"""Parameter specs shared by a recipe's two front doors: `build_launch` (JSON params) and its CLI.

One validator serves both: the CLI parses every option as a string and hands the strings to
`validate`, which coerces and checks them exactly as it checks the JSON values of a recipe.
So a bad approach fails in `build_launch`, before anything is launched, with the same message
the module would print. Standard library only.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.protocol.recipes import RecipeError
from runners.recipes import Recipe, module_argv

_MISSING = object()


@dataclass(frozen=True)
class Param:
    """One recipe parameter. kind: int, float, bool, str, choice, int_list, str_list."""

    name: str
    kind: str
    default: Any = None
    help: str = ""
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    required: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def label(self) -> str:
        return f"params.{self.name} ({self.flag})"


def _fail(param: Param, why: str) -> RecipeError:
    return RecipeError(f"{param.label}: {why}")


def _number(param: Param, raw: Any, cast: type) -> float:
    if isinstance(raw, bool):
        raise _fail(param, f"must be {'an integer' if cast is int else 'a number'}, got {raw!r}")
    if isinstance(raw, str):
        try:
            value = cast(raw.strip())
        except ValueError:
            raise _fail(param, f"must be {'an integer' if cast is int else 'a number'}, got {raw!r}") from None
    elif isinstance(raw, (int, float)):
        value = cast(raw)
        if cast is int and value != raw:
            raise _fail(param, f"must be an integer, got {raw!r}")
    else:
        raise _fail(param, f"must be {'an integer' if cast is int else 'a number'}, got {raw!r}")
    if param.minimum is not None and value < param.minimum:
        raise _fail(param, f"must be >= {param.minimum:g}, got {value!r}")
    return value


TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _coerce(param: Param, raw: Any) -> Any:
    if param.kind == "bool":
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in TRUE + FALSE:
            return raw.strip().lower() in TRUE
        raise _fail(param, f"must be true or false, got {raw!r}")
    if param.kind == "int":
        return _number(param, raw, int)
    if param.kind == "float":
        return _number(param, raw, float)
    if param.kind in ("str", "choice"):
        if not isinstance(raw, str) or not raw:
            raise _fail(param, f"must be a non-empty string, got {raw!r}")
        if param.kind == "choice" and raw not in param.choices:
            raise _fail(param, f"must be one of {', '.join(param.choices)}; got {raw!r}")
        return raw
    if param.kind == "int_list":
        items = [s for s in raw.split(",")] if isinstance(raw, str) else raw
        if not isinstance(items, (list, tuple)) or not items:
            raise _fail(param, f"must be a non-empty list of integers (CLI: comma-separated), got {raw!r}")
        one = Param(param.name, "int", minimum=param.minimum)
        try:
            return [_number(one, item, int) for item in items]
        except RecipeError:
            raise _fail(param, f"must be a non-empty list of integers >= {param.minimum or 0:g}, got {raw!r}") from None
    if param.kind == "str_list":
        items = [raw] if isinstance(raw, str) else raw
        if not isinstance(items, (list, tuple)) or not all(isinstance(s, str) for s in items):
            raise _fail(param, f"must be a list of strings, got {raw!r}")
        return list(items)
    raise AssertionError(f"unknown param kind {param.kind}")


def validate(params: dict[str, Any], spec: Sequence[Param]) -> dict[str, Any]:
    """Coerce and check params against spec; fill defaults. Raises RecipeError naming the parameter."""
    if not isinstance(params, dict):
        raise RecipeError("params: must be a mapping")
    by_name = {p.name: p for p in spec}
    unknown = sorted(set(params) - set(by_name))
    if unknown:
        raise RecipeError(f"params.{unknown[0]}: unknown parameter; expected one of {', '.join(p.name for p in spec)}")
    values: dict[str, Any] = {}
    for param in spec:
        raw = params.get(param.name, _MISSING)
        if raw is _MISSING or raw is None:
            if param.required:
                raise _fail(param, "is required")
            values[param.name] = list(param.default) if isinstance(param.default, list) else param.default
            continue
        values[param.name] = _coerce(param, raw)
    return values


def to_argv(values: dict[str, Any], spec: Sequence[Param]) -> list[str]:
    """The CLI flags that reproduce validated values (None and empty lists are left out)."""
    argv: list[str] = []
    for param in spec:
        value = values.get(param.name)
        if value is None:
            continue
        if param.kind == "int_list":
            argv.append(f"{param.flag}={','.join(str(v) for v in value)}")
        elif param.kind == "str_list":
            # `--flag=value` keeps argparse from reading a value like "--enable-foo" as an option.
            argv.extend(f"{param.flag}={item}" for item in value)
        elif param.kind == "bool":
            argv.append(f"{param.flag}={'true' if value else 'false'}")
        else:
            argv.append(f"{param.flag}={value}")
    return argv


def build_parser(prog: str, description: str, spec: Sequence[Param]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    for param in spec:
        default_text = "" if param.default is None else f" (default: {param.default})"
        kwargs: dict[str, Any] = {"dest": param.name, "default": None, "help": param.help + default_text}
        if param.kind == "str_list":
            kwargs["action"] = "append"
        parser.add_argument(param.flag, **kwargs)
    return parser


def singular_flags(argv: Sequence[str], renames: dict[str, str]) -> list[str]:
    """argv with each list param's singular flag (`renames`: param name -> "--server-arg") spelled as the
    parser's plural one ("--server-args"), so both spellings are taken."""
    out = []
    for arg in argv:
        for name, flag in renames.items():
            if arg == flag or arg.startswith(flag + "="):
                arg = "--" + name.replace("_", "-") + arg[len(flag) :]
                break
        out.append(arg)
    return out


def parse_cli(prog: str, description: str, spec: Sequence[Param], argv: Sequence[str] | None) -> dict[str, Any]:
    """Parse the CLI and validate through `validate`; on a bad value print it and exit 2."""
    parser = build_parser(prog, description, spec)
    ns = parser.parse_args(argv)
    raw = {p.name: getattr(ns, p.name) for p in spec if getattr(ns, p.name) is not None}
    try:
        return validate(raw, spec)
    except RecipeError as exc:
        parser.exit(2, f"{prog}: error: {exc}\n")
    raise AssertionError("unreachable")


def cli_values(
    prog: str,
    doc: str,
    spec: Sequence[Param],
    argv: Sequence[str] | None,
    validate_values: Callable[[dict[str, Any]], dict[str, Any]],
    renames: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A recipe's `python -m` entry point, before it runs: its flags (singular spellings taken), parsed, checked
    by the spec and then by the recipe's own `validate_values`; a combination it refuses exits 2 with the reason."""
    args = list(sys.argv[1:] if argv is None else argv)
    values = parse_cli(prog, doc.splitlines()[0], spec, singular_flags(args, renames or {}))
    try:
        return validate_values(values)
    except RecipeError as exc:
        usage_error(prog, str(exc))
    raise AssertionError("unreachable")


def usage_error(prog: str, message: str) -> None:
    """A combination the machine cannot run: say so and exit 2 (not a crash)."""
    sys.stderr.write(f"{prog}: error: {message}\n")
    sys.stderr.flush()
    sys.exit(2)


def module_recipe(prog: str, spec: Sequence[Param], validate: Callable[[dict[str, Any]], dict[str, Any]]) -> Recipe:
    """The RECIPE of a module launched as `python -m PROG` with its spec's flags (SAFE_ENV defaulted)."""
    return Recipe(
        spec=tuple(spec),
        validate=validate,
        argv=lambda values, python: module_argv(python, prog, to_argv(values, spec)),
        safe_env=True,
    )


def scaled(values: dict[str, Any], spec, names: tuple[str, ...]) -> bool:
    """True when any geometry parameter is below its full-model default (a CPU floor, not a model input)."""
    defaults = {p.name: p.default for p in spec}
    return any(values[n] < defaults[n] for n in names)
