"""Heavy imports as phases: a recipe is never silent while torch loads.

`announce_import("torch")`, first thing in a recipe's `main`, makes the process's first
`import torch` (wherever the recipe's body does it) print the phase `importing torch` before the
import starts and, once it has ended, the line `torch 2.13.0+cpu imported in 8.4 s` and the
phase `running`. Importing torch takes seconds to tens of seconds on a cold node; without this the
trial page shows nothing until the recipe's first result. Only the launcher and rank 0 announce
(every rank imports torch; one announcement is enough). Standard library only.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import time
from collections.abc import Sequence
from types import ModuleType

from app.protocol.metrics import emit_phase

IMPORTING = "importing {name}"  # the phase while it loads
AFTER = "running"  # the phase once it has loaded (the runner's own name for a started trial)


def _is_rank_zero() -> bool:
    """The launcher (no rank yet) or rank 0 (launch_ranks sets RANK; srun sets SLURM_PROCID)."""
    return (os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or "0") == "0"


class _Announcer(importlib.abc.MetaPathFinder):
    """Finds nothing itself: on the first import of `name` it announces, lets the other finders
    find the module, and wraps its loader to say when the module has loaded."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once; and the lookup below does not come back here
        emit_phase(IMPORTING.format(name=fullname))
        began = time.monotonic()
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec  # not installed: the import fails as it would have, after the phase
        spec.loader = _Timed(spec.loader, began)
        return spec


class _Timed(importlib.abc.Loader):
    """The module's own loader, plus one line once it has executed; then it steps aside."""

    def __init__(self, loader: importlib.abc.Loader, began: float) -> None:
        self.loader = loader
        self.began = began

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # Hand the module its real loader first: what it executes may look at __loader__ / __spec__.
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        named = " ".join(filter(None, (module.__name__, str(getattr(module, "__version__", "") or ""))))
        sys.stdout.write(f"{named} imported in {time.monotonic() - self.began:.1f} s\n")
        emit_phase(AFTER)


def announce_import(name: str) -> None:
    """Announce the first import of the top-level module `name` as phases (see the module docstring).
    Does nothing when it is imported already, or in a rank other than 0."""
    if name in sys.modules or not _is_rank_zero():
        return
    if any(isinstance(finder, _Announcer) and finder.name == name for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, _Announcer(name))
