"""A fixture campaign with measured metrics, built through the domain functions.

The allreduce latencies are the 2x H200 measurements in shared/domain.md (bf16, tokens x 7168);
the rest (accept length, draft and verify compute, the PCIe in-situ figure, the speculative
SGLang trial) are plausible values chosen for the tests and labelled FIXTURE. Secrets are
planted where the share page must never look (recipe env and argv, evidence, description,
trial errors, the host name in a fingerprint, a runner) so tests can assert none leak.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlmodel import Session

from app.domain import campaigns
from app.models import Campaign, Metric, StatusChange, Trial
from app.schemas import ApproachCreate, CampaignCreate, RecipeSpec

SLUG = "fixture-h200"
HIDDEN = 7168
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SECRETS = {
    "env": "ENV-SECRET-7f3a9c",
    "argv": "ARGV-SECRET-91bd2e",
    "evidence": "EVIDENCE-SECRET-55aa01",
    "description": "DESCRIPTION-SECRET-c0ffee",
    "error": "TRIAL-ERROR-SECRET-d00d",
    "hostname": "secret-host-4242",
    "model_path": "/models/SECRET-MODEL-PATH",
}
# domain.md, "Measured here on 2x H200": tokens -> us
H200 = {
    "nccl-eager": {1: 44.9, 8: 47.4, 64: 49.3, 256: 49.0},
    "nccl-graph": {1: 16.6, 8: 16.7, 64: 22.4, 256: 42.3},
    "symm-mem-two-shot": {1: 8.8, 8: 8.8, 64: 11.4},
    "symm-mem-one-shot": {1: 12.5, 8: 12.8, 64: 14.2},
}
H200_FP = {
    "hostname": SECRETS["hostname"],
    "gpu_count": 2,
    "sm": "9.0",
    "torch": "2.11.0",
    "nccl": "2.27.5",
    "cuda": "12.8",
    "gpus": [{"name": "NVIDIA H200", "sm": "9.0"}],
}
SEED_FP = {
    "hostname": SECRETS["hostname"],
    "gpu_count": 8,
    "sm": "12.0",
    "torch": "2.10.0+cu128",
    "cuda": "12.8",
    "gpus": [{"name": "NVIDIA RTX PRO 6000 Blackwell", "sm": "12.0"}],
}


def _sglang_recipe(flag: str | None = None) -> dict:
    return {
        "kind": "sglang_server",
        "env": {"HF_TOKEN": SECRETS["env"]},
        "params": {
            "model_path": SECRETS["model_path"],
            "tp_size": 8,
            "flags": [flag] if flag else [],
            "server_args": [f"--api-key={SECRETS['argv']}"],
            "speculative": {"algorithm": "EAGLE3", "draft_model_path": "/models/draft"},
        },
    }


def _allreduce_recipe(mode: str, backend: str = "nccl") -> dict:
    return {
        "kind": "allreduce",
        "env": {"NCCL_DEBUG": "INFO", "SECRET_TOKEN": SECRETS["env"]},
        "params": {"backend": backend, "mode": mode, "tokens": [1, 8, 64, 256]},
    }


class Builder:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.clock = T0
        self.campaign: Campaign | None = None  # set by the caller: the campaign the approaches belong to

    def _campaign(self) -> Campaign:
        if self.campaign is None:
            raise AssertionError("set the builder's campaign first")
        return self.campaign

    def tick(self, hours: float = 1.0) -> datetime:
        self.clock += timedelta(hours=hours)
        return self.clock

    def approach(self, key: str, title: str, recipe: dict | None = None, **extra):
        approach = campaigns.add_approach(
            self.session,
            self._campaign(),
            ApproachCreate(
                key=key,
                title=title,
                recipe=None if recipe is None else RecipeSpec.model_validate(recipe),
                evidence=f"notes {SECRETS['evidence']}",
                description=f"how: {SECRETS['description']}",
            ),
            actor="fixture",
        )
        for name, value in extra.items():
            setattr(approach, name, value)
        self._stamp_last_change(approach)
        return approach

    def _stamp_last_change(self, approach) -> None:
        change = campaigns.history(self.session, approach)[0]
        change.at = self.tick(0.5)
        self.session.add(change)
        self.session.flush()

    def trial(
        self,
        approach,
        metrics: list[tuple[str, float, str, dict]],
        *,
        fingerprint=None,
        state: str = "succeeded",
        error: str = "",
    ) -> Trial:
        start = self.tick(1)
        campaign_id = self._campaign().id
        assert campaign_id is not None
        trial = Trial(
            campaign_id=campaign_id,
            approach_id=approach.id,
            recipe=approach.recipe or {},
            state=state,
            phase="done",
            requested_by="fixture",
            fingerprint=fingerprint,
            error=error,
            created_at=start,
            started_at=start,
            finished_at=self.tick(0.4),
        )
        self.session.add(trial)
        self.session.flush()
        add_metrics(self.session, trial, metrics)
        self.session.flush()
        return trial

    def verdict(
        self, approach, status: str, reason: str, trial: Trial | None = None, *, fingerprint=None, bound=None
    ) -> StatusChange:
        change = campaigns.change_status(
            self.session, approach, status, reason, "fixture", trial_id=trial.id if trial else None
        )
        change.at = self.tick(0.2)
        approach.verdict_fingerprint = fingerprint
        approach.bound_to = {"components": bound} if bound else None
        self.session.add_all([change, approach])
        self.session.flush()
        return change


def allreduce_metrics(latencies: dict[int, float], mode: str, backend: str = "nccl", world_size: int = 2):
    out = []
    for tokens, us in latencies.items():
        nbytes = tokens * HIDDEN * 2
        out.append(
            (
                "allreduce_latency_us",
                us,
                "us",
                {
                    "backend": backend,
                    "mode": mode,
                    "world_size": world_size,
                    "bytes": nbytes,
                    "tokens": tokens,
                    "dtype": "bf16",
                    "hidden_size": HIDDEN,
                    "torch": "2.11.0",
                },
            )
        )
        out.append(("allreduce_busbw_gbps", nbytes / us / 1e3, "GB/s", {"bytes": nbytes, "tokens": tokens}))
    return out


def build_fixture_campaign(session: Session, *, slug: str = SLUG, with_inputs: bool = True):
    """The fixture campaign: H200 allreduce curves, a PCIe in-situ figure, a speculative SGLang trial,
    throughput trials, dead ends with reasons and stacks, and an untested approach next in line."""
    b = Builder(session)
    campaign = b.campaign = campaigns.create_campaign(
        session,
        CampaignCreate(
            slug=slug,
            name="FIXTURE: EAGLE-3 break-even (H200 allreduce measurements + seed inputs)",
            description=f"Test fixture. {SECRETS['description']}",
            # Entered (the seed's 82 tok/s, which the baseline trial below also measures on the seed node): the
            # person typed it to weigh the H200 allreduces against; a T_base read from the seed node's trial
            # is never paired with another machine's t_ar (tests/charts/test_profitability.py).
            baseline_tok_s=82.0 if with_inputs else None,
            accept_length=2.4 if with_inputs else None,
            draft_steps=3 if with_inputs else None,
            draft_step_ms=0.5 if with_inputs else None,
            verify_compute_ms=9.0 if with_inputs else None,
            allreduces_per_verify=122,
            hidden_size=HIDDEN,
            verify_tokens=4,
        ),
    )
    campaign.created_at = T0

    pcie = b.approach("nccl-pcie", "NCCL on PCIe (seed node)", _sglang_recipe())
    graph = b.approach("nccl-graph", "NCCL in a CUDA graph", _allreduce_recipe("graph"))
    eager = b.approach("nccl-eager", "NCCL eager", _allreduce_recipe("eager"))
    two_shot = b.approach(
        "symm-mem-two-shot", "torch symm-mem two-shot", _allreduce_recipe("eager", "symm_mem_two_shot")
    )
    one_shot = b.approach(
        "symm-mem-one-shot", "torch symm-mem one-shot", _allreduce_recipe("eager", "symm_mem_one_shot")
    )
    pcie_ipc = b.approach(
        "flashinfer-pcie-ipc", "FlashInfer PCIe-IPC allreduce", _sglang_recipe("--enable-flashinfer-allreduce-fusion")
    )
    custom = b.approach("custom-allreduce", "SGLang custom allreduce (IPC)", _sglang_recipe())
    fusion = b.approach("flashinfer-fusion", "FlashInfer allreduce fusion", _sglang_recipe())
    b.approach("expert-parallelism", "Expert parallelism", _sglang_recipe("--ep-size=8"))
    b.approach("mscclpp", "MSCCL++", None)

    # Baseline: plain decode on the seed node, 82 tok/s (domain.md).
    baseline = b.trial(
        pcie,
        [
            ("output_throughput_tok_s", 82.0, "tok/s", {"source": "result_file"}),
            ("median_tpot_ms", 12.2, "ms", {"source": "result_file"}),
        ],
        fingerprint=SEED_FP,
    )
    campaign.baseline_trial_id = baseline.id
    # FIXTURE: in situ on PCIe, ~200 us per allreduce (domain.md's "~200 us each").
    pcie_step = b.trial(
        pcie,
        [
            (
                "allreduce_in_situ_us",
                200.0,
                "us",
                {"tokens": 4, "allreduces": 122, "layers": 61, "backend": "nccl", "mode": "graph"},
            ),
            ("verify_comm_ms", 24.4, "ms", {"tokens": 4}),
        ],
        fingerprint=SEED_FP,
    )
    b.verdict(
        pcie,
        "dead_end",
        "24.4 ms of allreduce per verify: more than speculation saves",
        pcie_step,
        fingerprint=SEED_FP,
        bound=["nccl", "sm"],
    )

    for approach, key, mode, backend in (
        (graph, "nccl-graph", "graph", "nccl"),
        (eager, "nccl-eager", "eager", "nccl"),
        (two_shot, "symm-mem-two-shot", "eager", "symm_mem"),
        (one_shot, "symm-mem-one-shot", "eager", "symm_mem"),
    ):
        trial = b.trial(approach, allreduce_metrics(H200[key], mode, backend), fingerprint=H200_FP)
        b.verdict(approach, "promising", f"{H200[key][8]} us at 8 tokens on 2x H200", trial, fingerprint=H200_FP)

    # FIXTURE: a speculative SGLang trial: TPOT 8.5 ms at accept length 2.6.
    spec = b.trial(
        pcie_ipc,
        [
            ("output_throughput_tok_s", 117.6, "tok/s", {"speculative_algorithm": "EAGLE3"}),
            ("median_tpot_ms", 8.5, "ms", {"speculative_algorithm": "EAGLE3"}),
            ("accept_length", 2.6, "", {"speculative_algorithm": "EAGLE3"}),
        ],
        fingerprint=SEED_FP,
    )
    b.verdict(pcie_ipc, "promising", "117.6 tok/s with EAGLE-3", spec, fingerprint=SEED_FP)

    slow = b.trial(custom, [("output_throughput_tok_s", 38.0, "tok/s", {})], fingerprint=SEED_FP)
    b.verdict(
        custom,
        "dead_end",
        "38 tok/s vs 82 tok/s NCCL: 56 concurrent cross-GPU reads saturate the PCIe switch",
        slow,
        fingerprint=SEED_FP,
    )
    failed = b.trial(fusion, [], fingerprint=SEED_FP, state="failed", error=f"JIT failed {SECRETS['error']}")
    b.verdict(
        fusion,
        "dead_end",
        "FlashInfer JIT has no SM120 target",
        failed,
        fingerprint=SEED_FP,
        bound=["flashinfer", "sm"],
    )
    mscclpp = campaigns.get_approach(session, campaign, "mscclpp")
    b.verdict(mscclpp, "deferred", "not installed; needs a build")
    session.add(campaign)
    session.flush()
    return campaign


def add_metrics(session: Session, trial: Trial, metrics: list[tuple], *, seq: int = 0) -> None:
    """Store a trial's metric rows, as the log parser would: (name, value, tags) or (name, value, unit, tags)."""
    assert trial.id is not None
    for index, row in enumerate(metrics):
        name, value, *unit, tags = row
        session.add(
            Metric(
                trial_id=trial.id,
                approach_id=trial.approach_id,
                campaign_id=trial.campaign_id,
                seq=seq,
                index=index,
                name=name,
                value=value,
                unit=unit[0] if unit else "",
                tags=tags,
            )
        )


# The NCCL eager sweep re-run after a stack upgrade (FIXTURE values): the question a comparison answers.
UPGRADED_FP = {**H200_FP, "torch": "2.12.0", "nccl": "2.28.3"}
RERUN_US = {1: 41.2, 8: 43.0, 64: 45.9, 256: 47.1}


def build_fixture_rerun(session: Session) -> tuple[int, int]:
    """The fixture campaign plus a re-run of its NCCL eager trial on an upgraded stack (torch 2.12.0,
    NCCL 2.28.3; same GPUs): the ids of both trials (the compare page's test and screenshot)."""
    from sqlmodel import select

    from app.models import Approach

    campaign = build_fixture_campaign(session)
    approach = session.exec(
        select(Approach).where(Approach.campaign_id == campaign.id, Approach.key == "nccl-eager")
    ).one()
    eager = session.exec(select(Trial).where(Trial.approach_id == approach.id)).one()
    assert approach.id is not None
    at = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)
    rerun = Trial(
        campaign_id=campaign.id,
        approach_id=approach.id,
        recipe=approach.recipe or {},
        state="succeeded",
        phase="done",
        requested_by="fixture",
        fingerprint=UPGRADED_FP,
        created_at=at,
        started_at=at,
        finished_at=at + timedelta(minutes=20),
    )
    session.add(rerun)
    session.flush()
    add_metrics(session, rerun, allreduce_metrics(RERUN_US, "eager"))
    assert eager.id is not None and rerun.id is not None
    return eager.id, rerun.id
