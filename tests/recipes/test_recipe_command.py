"""The command recipe and its metric wrapper, with real child processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from app.protocol.recipes import RecipeError
from runners.recipes import build_launch
from tests.support.paths import ROOT
from tests.support.recipes import metrics, run_spec

PY = sys.executable


def test_plain_command_launches_as_given():
    spec = build_launch({"kind": "command", "params": {"argv": ["echo", "hi; rm -rf /"]}, "timeout_s": 5})
    assert spec.argv == ["echo", "hi; rm -rf /"] and spec.timeout_s == 5.0
    assert run_spec(spec).stdout == "hi; rm -rf /\n"  # one argv element, never a shell string


def test_metrics_from_regex_matches_and_exit_code_passes_through():
    script = (
        "import sys\nprint('step 1 throughput: 81.93 tok/s', flush=True)\n"
        "print('warn: tpot=12.5ms', file=sys.stderr, flush=True)\nprint('step 2 throughput: 40 tok/s')\nsys.exit(3)"
    )
    spec = build_launch(
        {
            "kind": "command",
            "params": {
                "argv": [PY, "-c", script],
                "metrics": {
                    "tok_s": {"regex": r"throughput: ([0-9.]+) tok/s", "unit": "tok/s"},
                    "tpot_ms": {"regex": r"tpot=([0-9.]+)ms", "unit": "ms"},
                },
            },
        }
    )
    assert spec.argv[:3] == [PY, "-m", "runners.recipes.command"] and "--" in spec.argv
    done = run_spec(spec)
    assert done.returncode == 3
    assert "step 1 throughput: 81.93 tok/s" in done.stdout and "warn: tpot=12.5ms" in done.stderr
    found = [(m["name"], m["value"], m["unit"]) for m in metrics(done.stdout)]
    assert found == [("tok_s", 81.93, "tok/s"), ("tpot_ms", 12.5, "ms"), ("tok_s", 40.0, "tok/s")] or sorted(
        found
    ) == sorted([("tok_s", 81.93, "tok/s"), ("tpot_ms", 12.5, "ms"), ("tok_s", 40.0, "tok/s")])


def test_wrapper_forwards_sigterm_and_streams_unbuffered():
    script = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('child got SIGTERM', flush=True), sys.exit(7)))\n"
        "print('ready', flush=True)\ntime.sleep(30)\n"
    )
    spec = build_launch(
        {"kind": "command", "params": {"argv": [PY, "-c", script], "metrics": {"x": {"regex": r"x=(\d+)"}}}}
    )
    proc = subprocess.Popen(spec.argv, env={**os.environ, **spec.env}, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"  # arrives while the child still runs
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=20)
    assert "child got SIGTERM" in rest
    assert proc.returncode == 7


@pytest.mark.parametrize(
    ("metrics_param", "message"),
    [
        ({"x": {"regex": "no group"}}, "params.metrics.x.regex: needs a capture group"),
        ({"x": {"regex": "("}}, "params.metrics.x.regex: not a valid regular expression"),
        ({"x": {"regex": "(1)", "scale": 2}}, "params.metrics.x.scale: unknown key"),
        ({"bad name": {"regex": "(1)"}}, "params.metrics.bad name"),
        ([1], "params.metrics: must be a mapping"),
    ],
)
def test_bad_metric_specs_fail_before_launch(metrics_param, message):
    with pytest.raises(RecipeError) as err:
        build_launch({"kind": "command", "params": {"argv": ["true"], "metrics": metrics_param}})
    assert message in str(err.value)


def test_wrapper_cli_refuses_missing_command():
    done = subprocess.run(
        [PY, "-m", "runners.recipes.command", "--metric", "x==(1)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "no command given" in done.stderr
