"""Stack fingerprint diff: re-test flags appear only when a bound component changes."""

from __future__ import annotations

import copy

import pytest

from app.domain.fingerprint import (
    STACK_COMPONENTS,
    component_value,
    describe_binding,
    retest_reason,
    stack_changes,
)

# The node the campaign ran on (domain.md): 8x RTX PRO 6000 Blackwell, torch 2.10.0+cu128.
BLACKWELL = {
    "hostname": "node-a",
    "cpu_count": 64,
    "python": "3.12.3",
    "gpu_count": 8,
    "gpus": [{"name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "sm": "12.0", "memory_mib": 97887}] * 8,
    "sm": "12.0",
    "driver": "575.57.08",
    "cuda": "12.8",
    "torch": "2.10.0+cu128",
    "nccl": "2.27.3",
    "sglang": "0.5.9",
    "flashinfer": "0.5.3",
}
SYMM_MEM = {"components": ["torch", "sm"]}


def changed(**updates):
    fp = copy.deepcopy(BLACKWELL)
    fp.update(updates)
    return fp


def test_component_values():
    assert component_value(BLACKWELL, "torch") == "2.10.0+cu128"
    assert component_value(BLACKWELL, "sm") == "12.0"
    assert component_value(BLACKWELL, "gpu") == "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    assert component_value({"gpus": [{"name": "H200", "sm": "9.0"}], "sm": None}, "sm") == "9.0"
    assert component_value({"torch": None}, "torch") is None
    assert component_value(None, "torch") is None
    with pytest.raises(ValueError):
        component_value(BLACKWELL, "kernel")
    assert {"torch", "sm", "cuda", "driver", "nccl", "sglang", "flashinfer"} <= set(STACK_COMPONENTS)


def test_describe_binding():
    assert describe_binding(SYMM_MEM, BLACKWELL) == "torch 2.10.0+cu128 on SM 12.0"
    assert describe_binding({"components": ["sglang"]}, BLACKWELL) == "sglang 0.5.9"
    assert describe_binding({"components": ["cuda", "sm"]}, BLACKWELL) == "CUDA 12.8 on SM 12.0"
    assert describe_binding(None, BLACKWELL) is None
    assert describe_binding({"components": []}, BLACKWELL) is None


def test_bound_component_change_flags_retest():
    assert (
        retest_reason(SYMM_MEM, BLACKWELL, changed(torch="2.11.0+cu130"))
        == "re-test: torch 2.10.0+cu128 -> 2.11.0+cu130"
    )
    hopper = changed(sm="9.0", gpus=[{"name": "NVIDIA H200", "sm": "9.0", "memory_mib": 143771}])
    assert retest_reason(SYMM_MEM, BLACKWELL, hopper) == "re-test: SM 12.0 -> 9.0"
    both = retest_reason(SYMM_MEM, BLACKWELL, changed(torch="2.11.0", sm="10.0"))
    assert both == "re-test: torch 2.10.0+cu128 -> 2.11.0, SM 12.0 -> 10.0"  # in bound_to order


def test_same_stack_or_unrelated_change_does_not_flag():
    assert retest_reason(SYMM_MEM, BLACKWELL, copy.deepcopy(BLACKWELL)) is None
    unrelated = changed(sglang="0.5.23", driver="580.159.04", nccl="2.28.9", hostname="node-b", cuda="13.0")
    assert retest_reason(SYMM_MEM, BLACKWELL, unrelated) is None
    # ...but the same change does flag a verdict bound to what changed.
    assert retest_reason({"components": ["sglang"]}, BLACKWELL, unrelated) == "re-test: sglang 0.5.9 -> 0.5.23"


def test_unbound_verdicts_never_flag():
    newer = changed(torch="2.11.0", sm="9.0", sglang="0.5.23", cuda="13.0")
    assert retest_reason(None, BLACKWELL, newer) is None
    assert retest_reason({"components": []}, BLACKWELL, newer) is None


def test_runner_that_does_not_report_a_component_is_no_reason_to_retest():
    assert retest_reason(SYMM_MEM, BLACKWELL, changed(torch=None)) is None
    # A verdict reached where the component was unknown is re-tested once it is known.
    assert retest_reason({"components": ["flashinfer"]}, changed(flashinfer=None), BLACKWELL) == (
        "re-test: FlashInfer unknown -> 0.5.3"
    )


def test_stack_changes_lists_every_difference():
    changes = stack_changes(BLACKWELL, changed(torch="2.11.0", nccl="2.28.9"))
    assert changes == [("torch", "2.10.0+cu128", "2.11.0"), ("nccl", "2.27.3", "2.28.9")]
