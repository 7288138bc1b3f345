"""What the sglang_server recipe and its preflight checks share: `python -m sglang.launch_server ...` for the
recipe's validated values (an argv list, every flag its own element), and running a helper command with its
output merged and bounded (`run_merged`). A leaf module: the recipe and its preflight checks
(runners/preflight/checks.py, which the recipe runs) both import it, so neither imports the other's module in a
cycle."""

from __future__ import annotations

import subprocess
from typing import Any


def run_merged(
    argv: list[str], *, env: dict[str, str], timeout_s: float, start_new_session: bool = False
) -> tuple[int | None, str]:
    """(exit code, stdout and stderr merged as text); the code is None when it did not finish within timeout_s
    (the output so far comes with it). Raises OSError when it cannot start."""
    try:
        done = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env=env,
            timeout=timeout_s,
            start_new_session=start_new_session,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout if isinstance(exc.stdout, str) else (exc.stdout or b"").decode("utf-8", "replace")
        return None, out
    return done.returncode, done.stdout


def server_argv(values: dict[str, Any]) -> list[str]:
    argv = [
        values["sglang_python"],
        "-m",
        "sglang.launch_server",
        "--model-path",
        values["model_path"],
        "--tp-size",
        str(values["tp_size"]),
        "--host",
        values["host"],
        "--port",
        str(values["port"]),
    ]
    argv += values["server_args"]
    for name, flag in (
        ("speculative_algorithm", "--speculative-algorithm"),
        ("speculative_draft_model_path", "--speculative-draft-model-path"),
        ("speculative_num_steps", "--speculative-num-steps"),
        ("speculative_eagle_topk", "--speculative-eagle-topk"),
        ("speculative_num_draft_tokens", "--speculative-num-draft-tokens"),
    ):
        if values[name] is not None:
            argv += [flag, str(values[name])]
    return argv
