"""Issue 43 item 14: a config never differs from the answer silently. Read back from what each writer emits (the
file or the JSON, by the engine's own routing rule), every measured batch where the config's draft length is not
the answer's is inside a stated deviation, with the answer's choice, the config's and the predicted cost. The MoE
campaign (docs/results/moe-sweep-h200x1.yaml) turns speculation off at batch 4 and grows k with batch: TensorRT-LLM
1.4.0rc4 cannot express either."""

from __future__ import annotations

import json
from bisect import bisect_left

import pytest
import yaml

from app.db import session_scope
from app.domain.answer.configs import config_json, engine_config
from app.domain.answer.read import read_answer
from app.state import app_state
from tests.support.results import ALPHAS, import_results


def _trtllm_k(config, batch: int) -> int:
    """TensorRT-LLM 1.4.0rc4's get_draft_len_for_batch_size: the smallest key at or above the batch, else 0."""
    schedule = yaml.safe_load(config.files[0].content)["speculative_config"]["draft_len_schedule"]
    keys = sorted(schedule)
    i = bisect_left(keys, batch)
    return schedule[keys[i]] if i < len(keys) else 0


def _vllm_k(config, batch: int) -> int:
    ranges = json.loads(config.argv[1])["num_speculative_tokens_per_batch_size"]
    return next(k for start, end, k in ranges if start <= batch <= end)


def _sglang_k(config, batch: int) -> int:
    slots = json.loads(config.files[0].content)  # the slot with the largest key at or below the batch
    return slots[str(max(int(key) for key in slots if int(key) <= batch))]["candidate_steps"][0]


READ_BACK = {"trtllm": _trtllm_k, "vllm": _vllm_k, "sglang": _sglang_k}


@pytest.fixture
def moe(app):
    with session_scope(app_state(app).engine) as session:
        yield read_answer(session, import_results(session, "moe-sweep-h200x1", ALPHAS))


def test_no_config_differs_from_the_answer_without_saying_so(moe):
    chosen = moe.speculation.chosen
    assert chosen is not None and chosen.best_draft_tokens[4] == 0 and chosen.best_draft_tokens[1] == 1
    assert chosen.best_draft_tokens[128] > chosen.best_draft_tokens[1]  # k grows with batch: no schedule from max
    for engine, read_k in READ_BACK.items():
        config = engine_config(engine, moe.speculation, moe.approaches)
        assert config.rules, engine  # it names the release whose rules it follows
        for b, answer_k in chosen.best_draft_tokens.items():
            written = read_k(config, b)
            if written == answer_k:
                continue
            stated = [d for d in config.deviations if d.start <= b <= d.end]
            assert stated, f"{engine} writes k = {written} at batch {b} where the answer says {answer_k}, silently"
            (d,) = stated
            assert (d.answer_k, d.config_k) == (answer_k, written)
            cost = next(x for x in d.batches if x.batch == b)
            assert cost.config_speedup is not None and cost.answer_speedup is not None and cost.loss is not None
        assert config.expressible == (not config.deviations)


def test_trtllm_states_what_it_cannot_express_and_its_cost(moe):
    config = engine_config("trtllm", moe.speculation, moe.approaches)
    assert not config.expressible and config.rules == "TensorRT-LLM 1.4.0rc4"
    # It said "on at k = 1" for batches 3-4 before, in a note that called it a floor, with no cost.
    off = next(d for d in config.deviations if d.start <= 4 <= d.end)
    assert off.answer_k == 0 and off.config_k >= 1
    (at_4,) = off.batches
    assert at_4.answer_speedup == 1.0 and at_4.config_speedup is not None and at_4.config_speedup < 1.0
    assert "the answer says off" in off.text and "predicted" in off.text
    assert any("cannot express this answer" in n for n in config.notes)
    assert "max_concurrency" not in config.files[0].content  # exclusive with draft_len_schedule in 1.4.0rc4
    document = config_json(config)
    assert document["rules"] == "TensorRT-LLM 1.4.0rc4" and document["expressible"] is False
    assert [d["start"] for d in document["deviations"]] == [d.start for d in config.deviations]
    assert all(b["loss"] is not None for d in document["deviations"] for b in d["batches"])
    # The nearest schedule is chosen by the answer's own cells: no other expressible schedule beats its mean.
    chosen = moe.speculation.chosen
    measured = [b for b in chosen.best_speedup if b <= chosen.break_even_batch]

    def mean(read) -> float:
        speedups = [1.0 if read(b) == 0 else chosen.cell(b, read(b)).speedup.value for b in measured]
        return sum(speedups) / len(speedups)

    written = mean(lambda b: _trtllm_k(config, b))
    all_at_one = mean(lambda b: 1)  # what it wrote before: k = 1 everywhere (capped at the batch-1 length)
    assert written >= all_at_one
