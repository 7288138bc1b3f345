"""The SGLang launch settings of the answer (app/domain/engine_config.py) against the pinned sglang's own
`ServerArgs` parser: every flag must exist and land in the field it means."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from app.domain.answer.grid import speculation_answer
from app.domain.engine_config import sglang_config
from app.models import Approach
from tests.contract.conftest import ROOT
from tests.support.speculation import approach, linear_curve, spec

FIELDS = (
    "model_path",
    "tp_size",
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "cuda_graph_bs_decode",
    "cuda_graph_max_bs_decode",
    "max_running_requests",
    "enable_torch_symm_mem",
    "disable_custom_all_reduce",
    "enable_mscclpp",
    "flashinfer_allreduce_fusion_backend",
)
PARSE = f"""
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser(prog="launch_server.py")
ServerArgs.add_cli_args(parser)
out = []
for argv in json.loads(sys.stdin.read()):
    ns = parser.parse_args(argv)
    out.append({{k: getattr(ns, k) for k in {FIELDS!r}}})
print(json.dumps(out))
"""

BACKENDS = {
    "nccl": ("disable_custom_all_reduce", True),
    "symm_mem_one_shot": ("enable_torch_symm_mem", True),
    "mscclpp": ("enable_mscclpp", True),
    "flashinfer": ("flashinfer_allreduce_fusion_backend", "auto"),
}


def _answer(batches=(1, 2, 4, 8, 16), ks=(1, 2, 3)):
    # Constant compute, a linear allreduce (400 of them) and alphas 0.8, 0.6, 0.4: by hand it pays up to
    # batch 8 (k = 2: 22.8 / (13 + 0.6 b) > 1 below b = 16.3, but k = 2 at 16 just about pays: 1.009).
    # With 500 allreduces every k loses at 16 (k = 2: 22.8 / (13 + 0.75 b) > 1 only below 13.1).
    curve = linear_curve(1 / 4096, [4096, 4096 * 256])
    taus = {1: 1.8, 2: 2.28, 3: 2.472}
    return speculation_answer(
        spec([approach("ar", batches, ks, curve=curve, verify=11.0)], batches, ks, taus, n_ar=500)
    )


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_sglang_config_parses_with_the_real_server_args(sglang_env, backend):
    answer = _answer()
    b_star = answer.chosen.break_even_batch
    assert b_star is not None and b_star < 16  # the case must turn speculation off somewhere
    row = Approach(key="ar", title="ar", campaign_id=1, recipe={"kind": "allreduce", "params": {"backend": backend}})
    config = sglang_config(answer, [row])
    argv = ["--model-path", "/m", "--tp-size", "2", *config.argv]
    done = subprocess.run(
        [sys.executable, "-c", PARSE],
        input=json.dumps([argv]),
        capture_output=True,
        text=True,
        env=sglang_env,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    parsed = json.loads(done.stdout.strip().splitlines()[-1])[0]
    k = answer.chosen.best_draft_tokens[b_star]
    assert parsed["speculative_algorithm"] == "EAGLE3"
    assert parsed["speculative_num_steps"] == k and parsed["speculative_eagle_topk"] == 1
    assert parsed["speculative_num_draft_tokens"] == k + 1
    assert parsed["cuda_graph_bs_decode"] == [b for b in (1, 2, 4, 8, 16) if b <= b_star]
    assert parsed["cuda_graph_max_bs_decode"] == b_star and parsed["max_running_requests"] == b_star
    field, value = BACKENDS[backend]
    assert parsed[field] == value
    assert all(s.source for s in config.settings)
