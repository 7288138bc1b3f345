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
    assert approaches["decode-step-nccl-graph"]["recipe"]["params"]["tokens"] == 1
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
