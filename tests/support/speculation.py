"""A campaign swept over (batch, draft tokens), for the model over batches: metric rows with samples, tagged
as the recipes' contract says (docs/recipes.md; /work CONTRACT: `batch`, `draft_tokens`, `tokens`, `context`).

The figures are SYNTHETIC, from a simple physics chosen so the answer has a shape worth testing: a step costs
10 ms + 0.1 ms per token (decode at b tokens, verify at b(k+1)), a draft step 0.5 ms + 0.005 ms per sequence,
and an allreduce a latency plus bytes over a bandwidth. Each row carries R samples drawn around its value
with a 2% spread (seeded), so the bootstrap has something to resample.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlmodel import Session

from app.domain import campaigns
from app.domain.answer.grid import ApproachInputs, SpeculationInputs
from app.domain.answer.values import Value as Measured
from app.models import Metric, Trial
from app.schemas import ApproachCreate, CampaignCreate, RecipeSpec

SLUG = "sweep-h200"
HIDDEN = 7168
N_AR = 122
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
DRAFT_TOKENS = (1, 2, 3, 4, 5, 6, 7)
ALPHAS = (0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2)
CONTEXT = 1024
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def step_ms(tokens: int) -> float:
    return 10.0 + 0.1 * tokens


def draft_ms(batch: int) -> float:
    return 0.5 + 0.005 * batch


# approach key -> (title, latency us, bytes per us, largest tokens measured)
ALLREDUCES = {
    "nccl-graph": ("NCCL in a CUDA graph", 17.0, 1.0e5, 1024),
    "symm-one-shot": ("symmetric memory one-shot in a graph", 6.6, 1.6e5, 1024),
    "symm-two-shot": ("symmetric memory two-shot in a graph", 6.7, 1.6e5, 64),  # too few sizes: cells stay open
}


def allreduce_us(key: str, nbytes: int, allreduces: dict | None = None) -> float:
    _title, latency, per_us, _top = (allreduces or ALLREDUCES)[key]
    return latency + nbytes / per_us


def many_allreduces(count: int) -> dict:
    """`count` allreduce approaches between NCCL-like and symmetric-memory-like (for the bench)."""
    return {
        f"allreduce-{i:02d}": (f"allreduce variant {i}", 6.0 + 12.0 * i / max(count - 1, 1), 1.0e5 + 3e3 * i, 1024)
        for i in range(count)
    }


def _samples(rng: np.random.Generator, value: float, r: int, spread: float) -> list[float]:
    return [float(x) for x in rng.normal(value, value * spread, r)]


class SweepBuilder:
    def __init__(self, session: Session, *, seed: int = 7, r: int = 10, spread: float = 0.02) -> None:
        self.session = session
        self.rng = np.random.default_rng(seed)
        self.r = r
        self.spread = spread
        self.clock = T0
        self.campaign: Any = None  # set by the caller: the campaign the trials belong to
        self.allreduces = ALLREDUCES

    def trial(self, approach, rows: Sequence[tuple[str, float, dict[str, Any], list[float] | None]]) -> Trial:
        self.clock += timedelta(hours=1)
        trial = Trial(
            campaign_id=self.campaign.id,
            approach_id=approach.id,
            recipe=approach.recipe or {},
            state="succeeded",
            phase="done",
            requested_by="fixture",
            created_at=self.clock,
            started_at=self.clock,
            finished_at=self.clock + timedelta(minutes=20),
        )
        self.session.add(trial)
        self.session.flush()
        assert trial.id is not None
        for index, (name, value, tags, samples) in enumerate(rows):
            mean = float(np.mean(samples)) if samples else value
            self.session.add(
                Metric(
                    trial_id=trial.id,
                    approach_id=approach.id,
                    campaign_id=self.campaign.id,
                    seq=0,
                    index=index,
                    name=name,
                    value=mean,
                    unit="ms" if name.endswith("_ms") else "us" if name.endswith("_us") else "",
                    tags=tags,
                    samples=samples,
                )
            )
        self.session.flush()
        return trial

    def point(self, value: float) -> tuple[float, list[float] | None]:
        samples = _samples(self.rng, value, self.r, self.spread) if self.r else None
        return value, samples

    def verify_sweep(self, approach, batches=BATCHES, ks=DRAFT_TOKENS, world: int = 2) -> Trial:
        world_tags = {"backend": "nccl", "mode": "graph", "device": "cuda", "scaled": False, "world_size": world}
        rows = []
        for b in batches:
            value, samples = self.point(step_ms(b))
            tags = {**world_tags, "batch": b, "tokens": b, "draft_tokens": 0, "context": CONTEXT}
            rows.append(("decode_step_ms", value, tags, samples))
            for k in ks:
                value, samples = self.point(step_ms(b * (k + 1)))
                tags = {**world_tags, "batch": b, "draft_tokens": k, "tokens": b * (k + 1), "context": CONTEXT}
                rows.append(("verify_compute_ms", value, tags, samples))
        return self.trial(approach, rows)

    def draft_sweep(self, approach, batches=BATCHES) -> Trial:
        rows = []
        for b in batches:
            value, samples = self.point(draft_ms(b))
            rows.append(("draft_step_ms", value, {"device": "cuda", "batch": b, "context": CONTEXT}, samples))
        return self.trial(approach, rows)

    def allreduce_sweep(self, approach, key: str) -> Trial:
        top = self.allreduces[key][3]
        rows = []
        tokens = 1
        while tokens <= top:
            nbytes = tokens * HIDDEN * 2
            value, samples = self.point(allreduce_us(key, nbytes, self.allreduces))
            tags = {"backend": "nccl", "mode": "graph", "method": "graph-replay", "world_size": 2, "device": "cuda"}
            rows.append(("allreduce_latency_us", value, {**tags, "bytes": nbytes, "tokens": tokens}, samples))
            tokens *= 4
        return self.trial(approach, rows)


def build_sweep_campaign(
    session: Session, *, slug: str = SLUG, r: int = 10, approaches: dict | None = None, batches=BATCHES
) -> SweepBuilder:
    """Three allreduce approaches, each with its verify sweep and allreduce curve; one draft sweep; accept
    lengths from per-position acceptance rates (entered) and one measured by an SGLang trial at k = 3."""
    b = SweepBuilder(session, r=r)
    b.allreduces = approaches or ALLREDUCES
    b.campaign = campaigns.create_campaign(
        session,
        CampaignCreate(
            slug=slug,
            name="SYNTHETIC: EAGLE-3 over batch sizes",
            allreduces_per_verify=N_AR,
            hidden_size=HIDDEN,
            draft_steps=3,
            accept_alphas=list(ALPHAS),
        ),
    )
    for key, (title, *_rest) in b.allreduces.items():
        approach = campaigns.add_approach(
            session,
            b.campaign,
            ApproachCreate(
                key=key,
                title=title,
                recipe=RecipeSpec.model_validate(
                    {"kind": "verify_step", "params": {"batches": list(batches), "draft_tokens": list(DRAFT_TOKENS)}}
                ),
            ),
            actor="fixture",
        )
        b.verify_sweep(approach, batches=batches)
        b.allreduce_sweep(approach, key)
        if key == next(iter(b.allreduces)):
            b.draft_sweep(approach, batches=batches)
    return b


# ---- pure cases: the model's inputs built directly (no database) -----------------------------------------

HAND_HIDDEN = 1024  # (pure cases) bytes per allreduce = b (k + 1) x 1024 x 2 = 4096 b at k = 1


def approach(key, batches, ks, *, base=10.0, draft=1.0, verify=11.0, curve=None, world=2, status="promising"):
    """Constant compute (the same figure at every batch) and an allreduce curve {bytes: us}."""
    return ApproachInputs(
        approach_id=hash(key) % 1000,
        key=key,
        title=key.replace("-", " "),
        status=status,
        t_base={b: base if isinstance(base, Measured) else Measured(base) for b in batches},
        draft_step={b: draft if isinstance(draft, Measured) else Measured(draft) for b in batches},
        verify_compute={
            (b, k): verify if isinstance(verify, Measured) else Measured(verify) for b in batches for k in ks
        },
        curve=sorted(
            (nbytes, us if isinstance(us, Measured) else Measured(us)) for nbytes, us in (curve or {}).items()
        ),
        curve_how="",
        world_size=world,
        deployable=status != "dead_end",
    )


def spec(approaches, batches, ks, tau, n_ar=10):
    return SpeculationInputs(
        batches=tuple(batches),
        draft_tokens=tuple(ks),
        n_ar=n_ar,
        hidden_size=HAND_HIDDEN,
        tau={k: v if isinstance(v, Measured) else Measured(v) for k, v in tau.items()},
        approaches=tuple(approaches),
        bytes_per_element=2,
        draft_steps=1,
    )


def linear_curve(us_per_byte: float, sizes) -> dict[int, float]:
    return {int(n): us_per_byte * n for n in sizes}
