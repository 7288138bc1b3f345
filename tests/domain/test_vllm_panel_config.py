"""The Deploy panel's vLLM `--speculative-config` names the method and the draft the approach's recipe names
(a vllm_server recipe's own JSON, an sglang_server recipe's algorithm and draft path), and what it prints is
a JSON the vllm_server recipe takes as is (its keys are vLLM 0.32's: tests/contract/test_vllm_engine.py)."""

from __future__ import annotations

import json

from app.domain.answer.configs.vllm import draft_of
from app.models import Approach
from runners.recipes.vllm_server import validate


def _approach(recipe: dict | None) -> Approach:
    return Approach(campaign_id=1, key="a", title="A", recipe=recipe)


def test_a_vllm_server_recipe_names_its_method_and_draft():
    recipe = {
        "kind": "vllm_server",
        "params": {
            "model": "/m",
            "speculative_config": {"method": "draft_model", "model": "/drafts/copy", "num_speculative_tokens": 3},
        },
    }
    assert draft_of(_approach(recipe)) == ("draft_model", "/drafts/copy")
    ngram = {"kind": "vllm_server", "params": {"model": "/m", "speculative_config": '{"method": "ngram"}'}}
    assert draft_of(_approach(ngram)) == ("ngram", None)


def test_an_sglang_recipe_deploys_as_its_vllm_method():
    recipe = {
        "kind": "sglang_server",
        "params": {"model_path": "/m", "speculative": {"algorithm": "EAGLE3", "draft_model_path": "/models/eagle3"}},
    }
    assert draft_of(_approach(recipe)) == ("eagle3", "/models/eagle3")


def test_without_a_named_draft_the_campaigns_question_stays():
    assert draft_of(_approach({"kind": "verify_step", "params": {}})) == ("eagle3", None)
    assert draft_of(_approach(None)) == ("eagle3", None)
    assert draft_of(None) == ("eagle3", None)


def test_what_the_panel_prints_is_what_the_recipe_takes():
    printed = {
        "method": "draft_model",
        "model": "/drafts/copy",
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 4, 3], [5, 64, 0]],
    }
    values = validate({"model": "/m", "speculative_config": json.dumps(printed, separators=(",", ":"))})
    assert json.loads(values["speculative_config"]) == printed
