"""The vLLM demo campaign (app/demo/vllm-speculation-cpu.yaml): every approach is a vllm_server recipe that
validates, needs the vLLM `make engine` installs, and a runner without it is told the one command."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from app.domain.runners import unmet_requirements
from runners.recipes import build_launch

DEMO = Path(__file__).resolve().parents[2] / "app" / "demo" / "vllm-speculation-cpu.yaml"
WITHOUT = {"gpu_count": 0, "gpus": [], "torch": "2.13.0", "vllm": None}
WITH = {**WITHOUT, "vllm": "0.32.0"}


def _config(approach: dict) -> dict | None:
    return approach["recipe"]["params"].get("speculative_config")


def test_the_approaches_cover_none_ngram_k1_to_4_a_copy_and_a_loser():
    approaches = yaml.safe_load(DEMO.read_text())["approaches"]
    methods = [(c or {}).get("method", "none") for c in map(_config, approaches)]
    assert methods.count("none") == 1
    assert sorted(c["num_speculative_tokens"] for c in map(_config, approaches) if c and c["method"] == "ngram") == [
        1,
        2,
        3,
        4,
    ]
    drafts = [c["model"] for c in map(_config, approaches) if c and c["method"] == "draft_model"]
    assert drafts == ["./.cache/vllm/models/tiny-llama-copy", "./.cache/vllm/models/tiny-llama-random"]
    ports = [a["recipe"]["params"]["port"] for a in approaches]
    assert len(set(ports)) == len(ports)  # each trial's server pair on its own ports


def test_each_runs_only_where_vllm_is_and_says_how_to_get_it():
    for approach in yaml.safe_load(DEMO.read_text())["approaches"]:
        spec = build_launch(approach["recipe"], python="/py")
        assert spec.argv[1:3] == ["-m", "runners.recipes.vllm_server"]
        config = next((a for a in spec.argv if a.startswith("--speculative-config=")), None)
        assert (config is None) == (_config(approach) is None)
        if config:
            assert json.loads(config.split("=", 1)[1]) == _config(approach)
        assert unmet_requirements(approach["requirements"], WITH) == []
        (missing,) = unmet_requirements(approach["requirements"], WITHOUT)
        assert missing.startswith("vllm (run 'make engine'")
