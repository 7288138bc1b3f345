"""The SGLang launch settings of the answer (app/domain/answer/configs/sglang.py) against the pinned sglang's own
code: every flag parses with `ServerArgs.add_cli_args` and lands in the field it means, and the adaptive
config loads with sglang's own `AdaptiveSpeculativeParams` and routes each batch to the k the answer chose."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from app.domain.answer.configs import DeployTarget, ServeRange, engine_config
from app.domain.answer.configs.sglang import FILE
from app.domain.answer.speculation import speculation_answer
from app.domain.answer.values import Conditions, Value, of_trials
from app.models import Approach
from tests.support.paths import ROOT
from tests.support.speculation import approach, linear_curve, spec

FIELDS = (
    "model_path",
    "tp_size",
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_adaptive",
    "speculative_adaptive_config",
    "cuda_graph_bs",
    "max_running_requests",
    "enable_torch_symm_mem",
    "disable_custom_all_reduce",
    "enable_mscclpp",
)
PARSE = f"""
import argparse, json, os, sys
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams
parser = argparse.ArgumentParser(prog="launch_server.py")
ServerArgs.add_cli_args(parser)
out = []
for case in json.loads(sys.stdin.read()):
    ns = parser.parse_args(case["argv"])
    found = {{k: getattr(ns, k, None) for k in {FIELDS!r}}}
    if ns.speculative_adaptive:
        path = os.path.join(case["dir"], ns.speculative_adaptive_config)
        params = AdaptiveSpeculativeParams(initial_steps=ns.speculative_num_steps, cfg_path=path)
        found["steps"] = {{str(b): params.get_steps_for_batch(b) for b in case["batches"]}}
        found["candidates"] = params.candidate_steps
    out.append(found)
print(json.dumps(out))
"""

BATCHES = (1, 2, 4, 8, 16)


def _answer(world_size: int = 2, batches=BATCHES, ks=(1, 2, 3)):
    # Constant compute, a linear allreduce (500 of them) and tau 1.8, 2.28, 2.472: it pays up to batch 8 and
    # loses at 16 (k = 2: 22.8 / (13 + 0.75 b) > 1 only below b = 13.1).
    curve = linear_curve(1 / 4096, [4096, 4096 * 256])
    taus = {1: 1.8, 2: 2.28, 3: 2.472}
    row = approach("ar", batches, ks, curve=curve, verify=11.0, world=world_size)
    return speculation_answer(spec([row], batches, ks, taus, n_ar=500))


def _parse(sglang_env, tmp_path, cases):
    payload: list[dict[str, Any]] = []
    for argv, config in cases:
        (tmp_path / FILE).write_text(config.files[0].content)
        case_dir = tmp_path / str(len(payload))
        case_dir.mkdir()
        (case_dir / FILE).write_text(config.files[0].content)
        payload.append({"argv": argv, "dir": str(case_dir), "batches": [*BATCHES, 3, 12, 100]})
    done = subprocess.run(
        [sys.executable, "-c", PARSE],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=sglang_env,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _row(backend: str) -> Approach:
    return Approach(key="ar", title="ar", campaign_id=1, recipe={"kind": "allreduce", "params": {"backend": backend}})


# (backend, TP, SM) -> the allreduce field the config sets (None: no allreduce flag at all)
CASES = {
    ("nccl", 2, "9.0"): "disable_custom_all_reduce",
    ("symm_mem_two_shot", 2, "9.0"): "enable_torch_symm_mem",  # SGLang runs two-shot at TP 2: measured
    ("symm_mem_one_shot", 2, "9.0"): None,  # SGLang would run two-shot: one-shot does not justify it
    ("symm_mem_two_shot", 8, "9.0"): None,  # SGLang would run multimem at TP 8 on SM 9.0
    ("symm_mem_two_shot", 2, "12.0"): None,  # not available at SM 12.0 in 0.5.23
    ("nccl", 1, "9.0"): None,  # TP 1: no allreduce
}


def test_sglang_config_parses_and_routes_with_the_real_sglang(sglang_env, tmp_path):
    configs = []
    for (backend, tp, sm), _field in CASES.items():
        answer = _answer(world_size=tp)
        config = engine_config("sglang", answer, [_row(backend)], target=DeployTarget(sm), serve=ServeRange(1, 16))
        configs.append((answer, config))
    parsed = _parse(sglang_env, tmp_path, [(["--model-path", "/m", "--tp-size", "2", *c.argv], c) for _a, c in configs])
    for ((backend, tp, sm), field), (answer, config), found in zip(CASES.items(), configs, parsed, strict=True):
        chosen = answer.chosen
        b_star = chosen.break_even_batch
        assert (b_star, chosen.first_losing_batch) == ((8, 16) if tp > 1 else (16, None))  # TP 1: no allreduce
        top = max(chosen.best_draft_tokens[b] for b in BATCHES if b <= b_star)
        assert found["speculative_algorithm"] == "EAGLE3" and found["speculative_adaptive"] is True
        assert found["speculative_num_steps"] == top and found["speculative_eagle_topk"] == 1
        assert found["speculative_num_draft_tokens"] == top + 1
        # sglang's own router: every measured batch gets its best k; above B* (and past the grid) it is off
        for b in BATCHES:
            assert found["steps"][str(b)] == (chosen.best_draft_tokens[b] if b <= b_star else 0), (b, found["steps"])
        assert found["steps"]["100"] == 0
        assert found["steps"]["3"] == chosen.best_draft_tokens[4]  # between measured batches: the larger one's k
        # never a sparse capture list, never a throughput cap
        assert found["cuda_graph_bs"] is None and found["max_running_requests"] is None
        allreduce = {f: found[f] for f in ("enable_torch_symm_mem", "disable_custom_all_reduce", "enable_mscclpp")}
        assert allreduce == {f: f == field for f in allreduce}, (backend, tp, sm, allreduce)
        assert all(s.source for s in config.settings)
        if (backend, tp) == ("symm_mem_one_shot", 2):
            assert "measured one-shot" in " ".join(config.notes)
            assert config.proposed_trials[0]["params"]["backend"] == "symm_mem_two_shot"
        if (backend, tp) == ("symm_mem_two_shot", 8):
            assert "multimem" in " ".join(config.notes)
            assert config.proposed_trials[0]["kind"] == "sglang_server"
        if tp == 1:
            assert "no allreduce flag" in " ".join(config.notes)


def test_the_one_k_line_parses_too(sglang_env, tmp_path):
    config = engine_config("sglang", _answer(), [_row("nccl")], target=DeployTarget("9.0"), serve=ServeRange(1, 16))
    static = config.static
    assert static is not None
    found = _parse(sglang_env, tmp_path, [(["--model-path", "/m", *static.argv], config)])[0]
    assert found["speculative_num_steps"] == static.k and found["speculative_num_draft_tokens"] == static.k + 1
    assert found["speculative_adaptive"] is False and found["disable_custom_all_reduce"] is True


def _measured_answer():
    """`_answer`'s figures as trials measured them: decode by trial #11, draft #12, verify #13 (two samples each),
    under context 1,024 and world size 2."""
    where = Conditions((("context", 1024), ("world_size", 2)))

    def by(trial: int, value: float) -> Value:
        return of_trials([[value, value * 1.001]], f"trial #{trial}", [trial], where)

    curve = {n: by(14, us) for n, us in linear_curve(1 / 4096, [4096, 4096 * 256]).items()}
    row = approach("ar", BATCHES, (1, 2, 3), base=by(11, 10.0), draft=by(12, 1.0), verify=by(13, 11.0), curve=curve)
    return speculation_answer(spec([row], BATCHES, (1, 2, 3), {1: 1.8, 2: 2.28, 3: 2.472}, n_ar=500))


@pytest.mark.parametrize("engine", ["sglang", "vllm", "trtllm"])
def test_every_setting_names_its_measurement(engine):
    """Each per-batch setting names the trials of the figures its cell reads and their conditions (the cell's
    inputs' trial_ids, never trial numbers parsed out of names), and an entered figure as entered."""
    config = engine_config(engine, _measured_answer(), [_row("nccl")], target=DeployTarget("9.0"))
    per_batch = [s for s in config.settings if "batches" in s.source]
    assert per_batch and all("trials #11, #12, #13, #14" in s.source for s in per_batch), per_batch
    assert all("measured under context 1,024, world size 2" in s.source for s in per_batch)
    entered = engine_config(engine, _answer(), [_row("nccl")], target=DeployTarget("9.0"))
    assert all("entered figures" in s.source for s in entered.settings if "batches" in s.source)
