"""The upgrade planner (app/domain/planning.upgrade_plan) on SQLite and PostgreSQL, on the Kimi demo: CUDA 12.8 ->
13.0 with torch 2.10 -> 2.11 re-opens exactly the FlashInfer allreduce fusion and torch symmetric memory (the
team's notes say so) and names what it leaves and why; a success of the same approach elsewhere on the board
re-opens it too; a runner's stack is a target; bad targets are clear errors."""

from __future__ import annotations

import pytest

from app.db import session_scope
from app.domain import campaigns, planning
from app.domain.demo import load_demo
from app.domain.errors import Invalid, NotFound
from app.models import Approach, ApproachStatus, Campaign
from tests.support.verdicts import runner

SLUG = "kimi-k25-eagle3"
NEW_STACK = {
    "gpu_count": 8,
    "sm": "12.0",
    "torch": "2.11.0+cu130",
    "cuda": "13.0",
    "gpus": [{"name": "NVIDIA RTX PRO 6000 Blackwell", "sm": "12.0"}],
}


@pytest.fixture
def demo(engine):
    with session_scope(engine) as s:
        load_demo(s)
    return engine


def plan(engine, *target: str, runner_id: int | None = None) -> planning.UpgradePlan:
    with session_scope(engine, write=False) as s:
        found = planning.upgrade_plan(
            s, campaigns.get_campaign(s, SLUG), planning.target_of(s, list(target), runner_id)
        )
        s.expunge_all()
        return found


def test_cuda_13_and_torch_2_11_reopen_exactly_the_bound_approaches(demo):
    found = plan(demo, "torch=2.11.0", "cuda=13.0").as_dict()
    assert found["changes"] == [
        {"component": "torch", "from": "2.10.0+cu128", "to": "2.11.0"},
        {"component": "cuda", "from": "12.8", "to": "13.0"},
    ]
    reopens = {r["key"]: r for r in found["reopens"]}
    assert set(reopens) == {"flashinfer-allreduce-fusion", "torch-symm-mem"}
    fusion, symm = reopens["flashinfer-allreduce-fusion"], reopens["torch-symm-mem"]
    assert (fusion["component"], fusion["died_on"]) == ("cuda", "12.8")
    assert fusion["cause"].startswith("FlashInfer JIT has no SM120 target")
    assert fusion["why"] == "the team's note: needs CUDA >= 13.0; the target has 13.0"
    assert (symm["component"], symm["died_on"]) == ("torch", "2.10.0+cu128")
    assert symm["cause"].startswith("KeyError: 12")
    assert symm["why"] == "the team's note: needs torch >= 2.11; the target has 2.11.0"
    assert symm["expected"]["needs"]["beat_best_us"] == 200.0  # its predicted payoff: no figure known yet
    untouched = {u["key"]: u["why"] for u in found["untouched"]}
    assert set(untouched) == {"sglang-custom-allreduce", "nccl-tree", "nccl-fewer-channels", "mscclpp"}
    assert untouched["nccl-tree"] == "bound to NCCL, which the target does not change"
    assert untouched["sglang-custom-allreduce"].startswith("not bound to any stack component (38 tok/s vs 82 tok/s")
    assert untouched["sglang-custom-allreduce"].endswith("no upgrade changes it")


def test_torch_alone_reopens_symmetric_memory_and_says_what_fusion_still_needs(demo):
    found = plan(demo, "torch=2.11.0")
    assert [r.closed.approach.key for r in found.reopens] == ["torch-symm-mem"]
    why = {u.closed.approach.key: u.why for u in found.untouched}
    assert why["flashinfer-allreduce-fusion"] == "needs CUDA >= 13.0, the target has 12.8"
    older = plan(demo, "torch=2.10.1")  # a newer patch, still below the note
    assert older.reopens == []
    assert {u.closed.approach.key: u.why for u in older.untouched}["torch-symm-mem"] == (
        "needs torch >= 2.11, the target has 2.10.1"
    )


def test_without_a_target_per_component(demo):
    found = plan(demo).as_dict()
    assert found["reopens"] == [] and found["untouched"] == [] and found["target"] == {}
    per = {c["component"]: [(a["key"], a["died_on"]) for a in c["approaches"]] for c in found["components"]}
    assert per["cuda"] == [("flashinfer-allreduce-fusion", "12.8")]
    assert per["torch"] == [("torch-symm-mem", "2.10.0+cu128")]
    assert per["nccl"] == [("nccl-tree", None)]  # the seed account does not state its NCCL version
    assert per["sm"] == [("flashinfer-allreduce-fusion", "12.0"), ("torch-symm-mem", "12.0")]
    assert "python" not in per and "driver" not in per


def test_a_success_of_the_same_approach_on_a_newer_stack_elsewhere_reopens_it(demo):
    with session_scope(demo) as s:
        other = Campaign(slug="elsewhere", name="elsewhere")
        s.add(other)
        s.flush()
        s.add(
            Approach(
                campaign_id=other.id,  # type: ignore[arg-type]
                key="nccl-tree",
                title="NCCL Tree algorithm",
                status=ApproachStatus.promising,
                bound_to={"components": ["nccl"]},
                verdict_fingerprint={"nccl": "2.28.9", "sm": "12.0"},
            )
        )
    found = plan(demo, "nccl=2.28.9")
    assert [(r.closed.approach.key, r.component) for r in found.reopens] == [("nccl-tree", "nccl")]
    assert found.reopens[0].why.startswith("NCCL Tree algorithm succeeded on NCCL 2.28.9 (promising, campaign #")
    below = plan(demo, "nccl=2.28.3")
    assert below.reopens == []
    assert {u.closed.approach.key: u.why for u in below.untouched}["nccl-tree"] == (
        "bound to NCCL, which the target changes, but no note or success says the upgrade fixes its cause: "
        "a re-test would tell"
    )


def test_a_runners_stack_is_a_target(demo):
    with session_scope(demo) as s:
        node = runner(s, "node-new", NEW_STACK).id
    found = plan(demo, runner_id=node)
    assert {r.closed.approach.key for r in found.reopens} == {"flashinfer-allreduce-fusion", "torch-symm-mem"}


def test_bad_targets(demo):
    with pytest.raises(Invalid, match="'torch' is not COMPONENT=VERSION"):
        plan(demo, "torch")
    with pytest.raises(Invalid, match="unknown stack component 'tensorrt'"):
        plan(demo, "tensorrt=10")
    with pytest.raises(Invalid, match="not both"):
        plan(demo, "torch=2.11", runner_id=1)
    with pytest.raises(NotFound, match="no runner #999"):
        plan(demo, runner_id=999)


def test_notes_are_read_from_the_reason_and_the_evidence():
    a = Approach(campaign_id=1, key="x", title="X", reason="Needs torch >= 2.11.", evidence="requires CUDA > 12.9")
    assert [str(n) for n in planning.verdict_notes(a)] == ["needs torch >= 2.11", "needs CUDA > 12.9"]
    assert planning.verdict_notes(a)[1].met_by("13.0") and not planning.verdict_notes(a)[1].met_by("12.9")
    assert planning.verdict_notes(a)[0].met_by("2.11.0+cu130") and planning.verdict_notes(a)[0].met_by(None) is None
