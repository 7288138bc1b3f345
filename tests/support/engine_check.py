"""A campaign holding a real engine's figures (the vllm_server recipe's metric names and tags, issue 42) and the
llama stand-in's (verify_step, geometry llama) on the same node, with hand-computable figures (FIXTURE values):

    batch 4, k 3: tau 2.5, engine step off 10 ms, on 16 ms; measured speedup samples 1.50 / 1.55 / 1.60
    batch 4, k 1: tau 1.8, engine step off 10 ms, on 13 ms; measured speedup 1.38 / 1.385 / 1.39
    stand-in (tiny Llama: hidden 128, 2 layers, MLP 256, 4 heads, 4 KV heads): decode at batch 4 = 2 ms,
    verify at (4, 1) = 3 ms, at (4, 3) = 4 ms

So at (4, 3): engine's counting 2.5 x 10 / 16 = 1.5625 (held: inside [1.50, 1.60]); the engine's per-step overhead
10 - 2 = 8 ms; the n-gram drafter measured at k 1: 13 - 3 - 8 = 2 ms; stand-in compute 2.5 x 2 / (2 + 4) = 0.8333
(missed by -46.24%); stand-in + overhead 2.5 x 10 / (2 + 4 + 8) = 1.7857 (missed by +15.21%).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlmodel import Session

from app.domain import campaigns
from app.models import Campaign, Metric, Trial
from app.schemas import ApproachCreate, CampaignCreate, RecipeSpec

SLUG = "engine-check"
FP = {"hostname": "cpu-node", "torch": "2.13.0+cpu", "gpu_count": 0, "gpus": []}
T0 = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
ENGINE_TAGS = {
    "engine": "vllm",
    "engine_version": "0.32.0",
    "model": ".cache/vllm/models/tiny-llama",
    "dtype": "bfloat16",
    "mode": "eager",
    "device": "cpu",
    "world_size": 1,
    "prompt_set": "repeats:seed=0",
    "input_len": 128,
    "output_len": 64,
    "prefix_caching": False,
    "temperature": 0.0,
    "ignore_eos": True,
}
STANDIN_TAGS = {
    "backend": "gloo",
    "mode": "eager",
    "world_size": 1,
    "dtype": "bf16",
    "device": "cpu",
    "standin": "dense",
    "geometry": "llama",
    "hidden_size": 128,
    "ffn_size": 256,
    "layers": 2,
    "heads": 4,
    "kv_heads": 4,
    "vocab": 2048,
    "context": 160,
}
# (batch, k) -> (tau, step off, step on, speedup samples)
ENGINE = {(4, 3): (2.5, 10.0, 16.0, [1.50, 1.55, 1.60]), (4, 1): (1.8, 10.0, 13.0, [1.38, 1.385, 1.39])}
DECODE = {4: 2.0}
VERIFY = {(4, 1): 3.0, (4, 3): 4.0}


class EngineCheckBuilder:
    def __init__(self, session: Session, slug: str = SLUG) -> None:
        self.session = session
        self.clock = T0
        self.campaign: Campaign = campaigns.create_campaign(
            session, CampaignCreate(slug=slug, name="FIXTURE: the answer against vLLM on a CPU")
        )
        spec = RecipeSpec.model_validate({"kind": "verify_step", "params": {"batches": [4], "draft_tokens": [0, 1, 3]}})
        self.engine_approach = campaigns.add_approach(
            session, self.campaign, ApproachCreate(key="vllm-ngram", title="vLLM, n-gram drafts", recipe=spec), "t"
        )
        self.standin_approach = campaigns.add_approach(
            session, self.campaign, ApproachCreate(key="llama-standin", title="Llama stand-in", recipe=spec), "t"
        )

    def trial(self, approach: Any, rows: list[tuple[str, float, dict[str, Any], list[float] | None]], fp=FP) -> Trial:
        self.clock += timedelta(hours=1)
        assert self.campaign.id is not None
        trial = Trial(
            campaign_id=self.campaign.id,
            approach_id=approach.id,
            recipe=approach.recipe or {},
            state="succeeded",
            phase="done",
            requested_by="fixture",
            created_at=self.clock,
            started_at=self.clock,
            finished_at=self.clock + timedelta(minutes=5),
            fingerprint=fp,
        )
        self.session.add(trial)
        self.session.flush()
        assert trial.id is not None
        for index, (name, value, tags, samples) in enumerate(rows):
            self.session.add(
                Metric(
                    trial_id=trial.id,
                    approach_id=approach.id,
                    campaign_id=self.campaign.id,
                    seq=0,
                    index=index,
                    name=name,
                    value=value,
                    unit="ms" if name.endswith("_ms") else "",
                    tags=tags,
                    samples=samples,
                )
            )
        self.session.flush()
        return trial

    def engine_trial(self, cells=None, fp=FP, **tags: Any) -> Trial:
        """One vllm_server trial per cell, tagged as the recipe tags its lines (runners/recipes/vllm_server.py on the
        vllm branch): spec-off figures carry no k, spec-on ones and the speedup carry k and `speculative_method`,
        a figure's `method` names how it was measured."""
        last = None
        for (b, k), (tau, off, on, speedups) in (cells or ENGINE).items():
            base = {**ENGINE_TAGS, **tags, "batch": b, "requests_per_window": 2 * b}
            off_tags = {**base, "spec": "off", "speculative_method": "none"}
            on_tags = {**base, "spec": "on", "speculative_method": "ngram", "draft_tokens": k}
            median = sorted(speedups)[len(speedups) // 2]
            acc = {**on_tags, "method": "prometheus-counter-delta"}
            rows = [
                ("engine_speedup", median, {**base, "speculative_method": "ngram", "draft_tokens": k}, speedups),
                ("engine_accept_length", tau, {**acc, "derivation": "1 + accepted / drafts"}, None),
                ("engine_step_ms", off, {**off_tags, "method": "iteration-counter"}, None),
                ("engine_step_ms", on, {**on_tags, "method": "iteration-counter"}, None),
                # the independent check's figure: read by no prediction (a different number on purpose)
                ("engine_step_ms", on * 3, {**on_tags, "method": "tpot-x-tokens-per-step"}, None),
                ("engine_output_tok_s", 100.0, off_tags, None),
            ]
            if k > 1:  # a k run also derives tau at shorter drafts (engine_acceptance does): never the k run's
                derived = {
                    **acc,
                    "draft_tokens": 1,
                    "derivation": "1 + sum of per-position rates to 1 (of a 3-token run)",
                }
                rows.append(("engine_accept_length", 1.1, derived, None))
            last = self.trial(self.engine_approach, rows, fp)
        assert last is not None
        return last

    def standin_trial(self, fp=FP, **tags: Any) -> Trial:
        rows: list[tuple[str, float, dict[str, Any], list[float] | None]] = []
        for b, ms in DECODE.items():
            t = {**STANDIN_TAGS, **tags, "batch": b, "draft_tokens": 0, "tokens": b}
            rows += [("decode_step_ms", ms, t, None), ("verify_compute_ms", ms, t, None)]
        for (b, k), ms in VERIFY.items():
            rows.append(("verify_compute_ms", ms, {**STANDIN_TAGS, **tags, "batch": b, "draft_tokens": k}, None))
        return self.trial(self.standin_approach, rows, fp)


def build_engine_check_campaign(session: Session, slug: str = SLUG) -> EngineCheckBuilder:
    b = EngineCheckBuilder(session, slug)
    b.standin_trial()
    b.engine_trial()
    return b
