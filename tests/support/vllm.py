"""The real vLLM (CPU build) the engine tests run: scripts/ensure-vllm installs it into .cache/vllm (once; a
second run checks it in seconds) and writes the tiny models. Never imported into the test process: the
recipe starts it with `--vllm-python`. Set CAMPAIGN_VLLM_PYTHON to use another install."""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import sys

from app.protocol.metrics import parse_metric_line
from tests.support.paths import ROOT

MODELS = ROOT / ".cache" / "vllm" / "models"
TARGET, COPY, RANDOM = MODELS / "tiny-llama", MODELS / "tiny-llama-copy", MODELS / "tiny-llama-random"
NGRAM_K3 = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


@functools.cache
def vllm_python() -> str:
    if os.environ.get("CAMPAIGN_VLLM_PYTHON"):
        return os.environ["CAMPAIGN_VLLM_PYTHON"]
    done = subprocess.run(
        [str(ROOT / "scripts" / "ensure-vllm")], cwd=ROOT, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, f"scripts/ensure-vllm failed:\n{done.stdout}\n{done.stderr}"
    return str(ROOT / done.stdout.strip().splitlines()[-1])


def port_pair() -> int:
    """A port p with p and p + 1 free (the recipe's two servers)."""
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        try:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise AssertionError("no two adjacent free ports")


def recipe_argv(port: int, *flags: str) -> list[str]:
    """The recipe as the runner launches it, with small windows (a 2-core CI machine)."""
    return [
        sys.executable,
        "-m",
        "runners.recipes.vllm_server",
        f"--model={TARGET}",
        f"--vllm-python={vllm_python()}",
        f"--port={port}",
        "--input-len=64",
        "--output-len=32",
        "--max-model-len=512",
        "--warmup-requests=1",
        "--ready-timeout-s=400",
        "--teardown-grace-s=10",
        *flags,
    ]


def run_recipe(*flags: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        recipe_argv(port_pair(), *flags), cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
    )


def metrics_of(text: str) -> list[dict]:
    return [m for m in map(parse_metric_line, text.splitlines()) if m]
