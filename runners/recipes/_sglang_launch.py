"""`python -m sglang.launch_server ...` for the sglang_server recipe's validated values: an argv list, every
flag its own element. A leaf module: the recipe and its preflight checks (runners/preflight/checks.py, which
the recipe runs) both import it, so neither imports the other's module in a cycle."""

from __future__ import annotations

from typing import Any


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
