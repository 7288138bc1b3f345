"""Helpers for recipe tests: run a LaunchSpec or a recipe module as a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys

from app.protocol.metrics import parse_metric_line
from runners.process import trial_env
from runners.recipes import LaunchSpec
from tests.support.paths import ROOT


def run_spec(spec: LaunchSpec, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        spec.argv, env=trial_env(spec.env), cwd=spec.cwd or ROOT, capture_output=True, text=True, timeout=timeout
    )


def run_module(module: str, *args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def metrics(text: str) -> list[dict]:
    return [m for m in map(parse_metric_line, text.splitlines()) if m]


def by_name(found: list[dict], name: str) -> list[dict]:
    return [m for m in found if m["name"] == name]
