"""The engine config writers' own rule checks (app/domain/answer/configs/): each refuses what its engine refuses
(vLLM's `num_speculative_tokens_per_batch_size`, TensorRT-LLM's `draft_len_schedule`, SGLang's adaptive config),
and the schedule never claims past the measured range."""

from __future__ import annotations

from typing import Any

import pytest

from app.domain.answer.configs import DeployTarget, ServeRange, engine_config, parse_serve_range
from app.domain.answer.configs.sglang import check_adaptive_config, symm_mem_kernel
from app.domain.answer.configs.trtllm import check_trtllm_schedule
from app.domain.answer.configs.vllm import check_vllm_schedule
from app.domain.answer.speculation import speculation_answer
from app.domain.errors import Invalid
from app.models import Approach
from tests.support.speculation import approach, linear_curve, spec


def test_vllm_schedule_rules():
    check_vllm_schedule([[1, 8, 3], [9, 32, 1], [33, 65536, 0]], 3)
    cases: list[tuple[list[list[Any]], str]] = [
        ([], "non-empty"),
        ([[2, 8, 3]], "start at batch 1"),
        ([[1, 8, 3], [8, 16, 2]], "overlaps"),
        ([[1, 8, 3], [20, 30, 2], [9, 19, 1]], "overlaps"),  # unsorted
        ([[1, 8, -1]], "K must be >= 0"),
        ([[1, 0, 2]], "above end"),
        ([[1, 8, 2.5]], "integers"),
        ([[1, 8]], "start_bs, end_bs, K"),
    ]
    for bad, why in cases:
        with pytest.raises(ValueError, match=why):
            check_vllm_schedule(bad, max((e[2] for e in bad if len(e) == 3), default=0))
    with pytest.raises(ValueError, match="largest K"):
        check_vllm_schedule([[1, 8, 3], [9, 16, 2]], 2)


def test_trtllm_schedule_rules():
    # TensorRT-LLM 1.4.0rc4: the smallest key's entry is max_draft_len (it needs no key 1), and max_concurrency is
    # exclusive with the schedule (the largest key is the cut-off).
    good = {"decoding_type": "Eagle3", "max_draft_len": 3, "draft_len_schedule": {4: 3, 8: 2}}
    check_trtllm_schedule(good)
    changes: list[tuple[dict[str, Any], str]] = [
        ({"draft_len_schedule": {4: 2, 8: 3}}, "must equal max_draft_len"),
        ({"draft_len_schedule": {1: 3, 8: 4}}, "above max_draft_len"),
        ({"draft_len_schedule": {1: 3, 8: 0}}, "floors K at 1"),
        ({"draft_len_schedule": {0: 3, 1: 3}}, ">= 1"),
        ({"draft_len_schedule": {}}, "non-empty"),
        ({"max_draft_len": 0}, ">= 1"),
        ({"max_concurrency": 8}, "mutually exclusive"),
    ]
    for change, why in changes:
        with pytest.raises(ValueError, match=why):
            check_trtllm_schedule({**good, **change})


def test_sglang_adaptive_config_rules():
    check_adaptive_config({"1": {"candidate_steps": [3]}, "9": {"candidate_steps": [0]}}, 3)
    for bad, steps, why in [
        ({"x": {}}, 1, "integer-string batch key"),
        ({"1": {"candidate_steps": []}}, 1, "non-negative ints"),
        ({"1": {"candidate_steps": [-1]}}, 1, "non-negative ints"),
        ({"1": {"candidate_steps": [2]}}, 3, "not in the candidate_steps"),
    ]:
        with pytest.raises(ValueError, match=why):
            check_adaptive_config(bad, steps)


def test_symm_mem_kernel_follows_sglang():
    assert symm_mem_kernel(9, 2) == "two_shot" and symm_mem_kernel(9, 8) == "multimem"
    assert symm_mem_kernel(10, 4) == "multimem" and symm_mem_kernel(12, 2) is None
    assert symm_mem_kernel(9, 3) is None and symm_mem_kernel(None, 2) is None


def test_serve_range():
    assert parse_serve_range(None) == ServeRange(1, 32) and parse_serve_range(" 8 - 64 ") == ServeRange(8, 64)
    assert parse_serve_range("16") == ServeRange(16, 16) and parse_serve_range("32-1") == ServeRange(1, 32)
    for bad in ("0-4", "a-b", "1-999999", "1e309", "-4"):
        with pytest.raises(Invalid):
            parse_serve_range(bad)


def _answer(n_ar: int, batches=(1, 2, 4, 8), ks=(1, 2, 3)):
    curve = linear_curve(1 / 4096, [4096, 4096 * 256])
    return speculation_answer(
        spec(
            [approach("ar", batches, ks, curve=curve, verify=11.0)], batches, ks, {1: 1.8, 2: 2.28, 3: 2.472}, n_ar=n_ar
        )
    )


def test_notes_never_claim_past_the_measured_range():
    answer = _answer(n_ar=100)  # pays at every measured batch (up to 8)
    assert answer.chosen.first_losing_batch is None and answer.chosen.break_even_batch == 8
    row = Approach(key="ar", title="ar", campaign_id=1, recipe={"kind": "allreduce", "params": {"backend": "nccl"}})
    for engine in ("sglang", "vllm", "trtllm"):
        config = engine_config(engine, answer, [row], target=DeployTarget("9.0"), serve=ServeRange(1, 32))
        text = " ".join([*config.notes, *(s.source for s in config.settings)])
        assert "above batch 8 not measured" in text and "does not pay" not in text, engine
    static = engine_config("sglang", answer, [row], serve=ServeRange(1, 32)).static
    assert static is not None and static.unmeasured == (9, 32)
