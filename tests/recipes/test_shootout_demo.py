"""The allreduce shootout demo: every candidate launches, and GPU candidates never go to a CPU runner."""

from __future__ import annotations

from pathlib import Path

import yaml

from app.domain.runners import unmet_requirements
from runners.recipes import build_launch

DEMO = Path(__file__).resolve().parents[2] / "app" / "demo" / "allreduce-shootout.yaml"
CPU_RUNNER = {"gpu_count": 0, "gpus": [], "torch": "2.13.0"}
H200_X2 = {"gpu_count": 2, "gpus": [{"sm": "9.0"}, {"sm": "9.0"}], "torch": "2.11.0", "nccl": "2.28.9"}


def _needs_gpu(recipe: dict) -> bool:
    params = recipe.get("params") or {}
    return params.get("backend", "gloo") != "gloo" if recipe["kind"] != "draft_step" else params.get("device") != "cpu"


def test_symm_mem_in_graphs_and_the_answer_inputs_are_candidates():
    approaches = {a["key"]: a for a in yaml.safe_load(DEMO.read_text())["approaches"]}
    for key, backend in (
        ("symm-mem-two-shot-graph", "symm_mem_two_shot"),
        ("symm-mem-one-shot-graph", "symm_mem_one_shot"),
    ):
        assert (
            approaches[key]["recipe"]["params"]["backend"] == backend
            and approaches[key]["recipe"]["params"]["mode"] == "graph"
        )
    for key in ("verify-step-symm-mem-two-shot-graph", "verify-step-symm-mem-one-shot-graph"):
        assert (
            approaches[key]["recipe"]["kind"] == "verify_step"
            and approaches[key]["recipe"]["params"]["mode"] == "graph"
        )
    assert approaches["decode-step-nccl-graph"]["recipe"]["params"]["draft_tokens"] == [0]
    assert {approaches[k]["recipe"]["params"]["mode"] for k in ("draft-step-graph", "draft-step-eager")} == {
        "graph",
        "eager",
    }


def test_gpu_candidates_stay_off_cpu_runners():
    approaches = yaml.safe_load(DEMO.read_text())["approaches"]
    cpu_runnable = []
    for approach in approaches:
        spec = build_launch(approach["recipe"])
        assert spec.timeout_s <= 300, approach["key"]  # a hung trial cannot eat a short GPU lease
        unmet_cpu = unmet_requirements(approach["requirements"], CPU_RUNNER)
        if _needs_gpu(approach["recipe"]):
            assert unmet_cpu, f"{approach['key']} would be offered to a CPU runner"
            assert not unmet_requirements(approach["requirements"], H200_X2), approach["key"]
        else:
            assert not unmet_cpu, approach["key"]
            cpu_runnable.append(approach["key"])
    assert cpu_runnable == ["gloo-cpu", "verify-step-gloo-cpu", "draft-step-cpu"]


def test_gpu_steps_sweep_batch_1_to_128_and_draft_tokens_1_to_7():
    approaches = {a["key"]: a for a in yaml.safe_load(DEMO.read_text())["approaches"]}
    batches = [1, 2, 4, 8, 16, 32, 64, 128]
    for key, approach in approaches.items():
        recipe = approach["recipe"]
        if recipe["kind"] not in ("verify_step", "draft_step") or not _needs_gpu(recipe):
            continue
        values = build_launch(recipe).argv
        params = recipe["params"]
        assert params["batches"] == batches, key
        assert "tokens" not in params, key  # the sweep, not the old single point
        if recipe["kind"] == "verify_step":
            assert params["context"] == 1024 and f"--batches={','.join(map(str, batches))}" in values, key
            expected = (
                [0] if key.startswith("decode-step") else [1, 3, 7] if params["mode"] == "eager" else list(range(1, 8))
            )
            assert params["draft_tokens"] == expected, key
            assert max(batches) * (max(expected) + 1) <= 1024, key  # verify up to 1,024 tokens
        else:
            assert params["context_len"] == 1024, key
