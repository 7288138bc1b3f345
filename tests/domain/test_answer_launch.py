"""The whole launch command of the Deploy panel (app/domain/answer/configs/launch.py): model, parallelism and
draft head around each engine's speculation arguments; shell-safe (pasted into bash, each argument arrives whole,
the files land byte for byte); a named placeholder where no recipe names a path."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from app.domain.answer.configs import config_json, engine_config
from app.domain.answer.configs.launch import model_paths
from app.domain.answer.configs.schedule import DRAFT_PLACEHOLDER, MODEL_PLACEHOLDER
from app.domain.answer.speculation import speculation_answer
from app.models import Approach
from tests.support.speculation import approach, linear_curve, spec

NASTY_MODEL = '/models/Kimi K2.5 "it\'s" $HOME `id`'
NASTY_DRAFT = "/models/eagle 3; rm -rf ~ 'draft'"


def _answer():
    curve = linear_curve(1 / 4096, [4096, 4096 * 256])
    batches, ks = (1, 2, 4, 8), (1, 2, 3)
    return speculation_answer(
        spec([approach("ar", batches, ks, curve=curve, verify=11.0, world=4)], batches, ks, {1: 1.8, 2: 2.28, 3: 2.472})
    )


def _rows(model: str | None = NASTY_MODEL, draft: str | None = NASTY_DRAFT) -> list[Approach]:
    chosen = Approach(key="ar", title="ar", campaign_id=1, recipe={"kind": "allreduce", "params": {"backend": "nccl"}})
    params: dict = {}
    if model:
        params["model_path"] = model
    if draft:
        params["speculative"] = {"algorithm": "EAGLE3", "draft_model_path": draft}
    server = Approach(key="srv", title="srv", campaign_id=1, recipe={"kind": "sglang_server", "params": params})
    return [chosen, server]


@pytest.mark.parametrize(
    ("engine", "head"),
    [
        ("vllm", ["vllm", "serve", NASTY_MODEL, "--tensor-parallel-size", "4"]),
        ("sglang", ["python", "-m", "sglang.launch_server", "--model-path", NASTY_MODEL, "--tp-size", "4"]),
        ("trtllm", ["trtllm-serve", NASTY_MODEL, "--tp_size", "4"]),
    ],
)
def test_the_whole_command_round_trips_through_a_shell(engine, head, tmp_path: Path):
    config = engine_config(engine, _answer(), _rows())
    launch = config.launch
    assert launch is not None and launch.tensor_parallel == 4
    assert list(launch.argv[: len(head)]) == head
    assert list(launch.argv[-len(config.argv) :]) == list(config.argv)  # the writer's arguments, unchanged
    assert shlex.split(launch.command) == list(launch.argv)
    if engine == "sglang":
        assert launch.argv[launch.argv.index("--speculative-draft-model-path") + 1] == NASTY_DRAFT
    assert launch.placeholders == ()
    assert "approach srv's recipe" in launch.model.source
    # Pasted into bash: a stand-in for each engine's program records the argv it got; the files are written.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("vllm", "python", "trtllm-serve"):
        stub = bin_dir / name
        stub.write_text(
            '#!/bin/sh\nexec "$REAL_PYTHON" -c \'import json, sys; print(json.dumps(sys.argv[1:]))\' "$@"\n'
        )
        stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "REAL_PYTHON": _real_python()}
    done = subprocess.run(["bash", "-c", launch.shell], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert [head[0], *json.loads(done.stdout)] == list(launch.argv)
    for f in launch.files:
        assert (tmp_path / f.name).read_text() == f.content.rstrip("\n") + "\n"
    # the API/CLI shape carries the same text
    assert config_json(config)["launch"]["shell"] == launch.shell


def _real_python() -> str:
    return subprocess.run(["sh", "-c", "command -v python3"], capture_output=True, text=True).stdout.strip()


def test_trtllm_yaml_names_the_draft_head_and_keeps_the_schedule():
    config = engine_config("trtllm", _answer(), _rows())
    assert config.launch is not None
    written = yaml.safe_load(config.launch.files[0].content)["speculative_config"]
    original = yaml.safe_load(config.files[0].content)["speculative_config"]
    assert written == {**original, "speculative_model": NASTY_DRAFT}
    assert config.launch.argv[-2:] == ("--extra_llm_api_options", config.files[0].name)


def test_a_named_placeholder_where_no_recipe_names_the_path():
    rows = _rows(model=None, draft=None)
    config = engine_config("sglang", _answer(), rows)
    launch = config.launch
    assert launch is not None
    assert launch.model.value == MODEL_PLACEHOLDER and launch.draft.value == DRAFT_PLACEHOLDER
    assert launch.placeholders == (MODEL_PLACEHOLDER, DRAFT_PLACEHOLDER)
    assert "replace <target-model-path>" in launch.model.source
    assert shlex.split(launch.command) == list(launch.argv)


def test_the_chosen_approach_s_own_paths_come_first():
    rows = _rows()
    rows[0].recipe = {"kind": "sglang_server", "params": {"model_path": "/m/own", "speculative_draft_model_path": "/d"}}
    model, draft = model_paths("ar", rows)
    assert (model.value, draft.value) == ("/m/own", "/d") and "the chosen approach" in model.source
