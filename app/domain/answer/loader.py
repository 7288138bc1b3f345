"""Where the batch model's inputs come from, and a campaign's answer (the model: `speculation.py`).

Each approach's grid reads its own newest sweep trial (the rows `profitability.load_campaign_metrics`
already reads, plus one query for their samples), else the newest campaign-wide one; tau per draft length
comes from the campaign, a speculative trial or the per-position acceptance rates (docs/profitability.md,
"The batch model"). No FastAPI here.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence

from sqlalchemy import Text, cast
from sqlmodel import Session, select

from app.domain.inventory import approaches
from app.domain.answer import (
    BYTES_PER_ELEMENT,
    CampaignMetrics,
    MetricRow,
    ModelInputs,
    allreduce_curve,
    is_cpu_floor,
    load_campaign_metrics,
    model_inputs,
)
from app.domain.answer.grid import (
    RESAMPLES,
    ApproachInputs,
    Measured,
    SpeculationAnswer,
    SpeculationInputs,
    accept_length_from_alphas,
    measured,
    size_label,
    speculation_answer,
)
from app.models import Approach, ApproachStatus, Campaign, Metric
from app.schemas import MODEL_INPUT_FIELDS
from runners.recipes.metric import MetricName


def _by_point(rows: list[MetricRow], samples: dict[tuple[int, int, int], list[float]], what: str) -> dict:
    """Rows keyed by batch (untagged = batch 1), newest trial first wins."""
    out: dict[int, Measured] = {}
    for m in rows:
        b = int(m.tags.get("batch") or 1)
        if b not in out:
            out[b] = measured(
                m.value,
                samples.get((m.trial_id, m.seq, m.index)),
                f"trial #{m.trial_id} ({m.name}, {what})",
                m.trial_id,
            )
    return out


def _verify_points(rows: list[MetricRow], samples: dict[tuple[int, int, int], list[float]]) -> dict:
    """verify_compute_ms keyed (batch, draft tokens); a row without a batch tag is batch 1 at tokens = k + 1."""
    out: dict[tuple[int, int], Measured] = {}
    for m in rows:
        b = int(m.tags.get("batch") or 1)
        k = m.tags.get("draft_tokens")
        if k is None:
            k = int(m.tags.get("tokens") or 0) // b - 1
        key = (b, int(k))
        if key[1] >= 1 and key not in out:
            out[key] = measured(
                m.value,
                samples.get((m.trial_id, m.seq, m.index)),
                f"trial #{m.trial_id} ({m.name} at {b * (int(k) + 1)} tokens)",
                m.trial_id,
            )
    return out


# A figure timed by the wall clock around a synchronize (`timer: wall-sync`, the recipes' `clock: wall`) is an
# independent check of the CUDA-event figure, not another model input (the recipes' contract).
CHECK_TIMERS = frozenset({"wall-sync"})


def _gpu(rows: list[MetricRow]) -> list[MetricRow]:
    """The rows that may feed the model: measured on a GPU at full geometry, by the headline timer."""
    return [m for m in rows if not is_cpu_floor(m.tags) and m.tags.get("timer") not in CHECK_TIMERS]


def _newest_trial_rows(rows: list[MetricRow]) -> list[MetricRow]:
    if not rows:
        return []
    newest = max(m.trial_id for m in rows)
    return [m for m in rows if m.trial_id == newest]


SAMPLED_METRICS = (
    MetricName.DECODE_STEP_MS,
    MetricName.DRAFT_STEP_MS,
    MetricName.VERIFY_COMPUTE_MS,
    MetricName.ALLREDUCE_LATENCY_US,
    *MetricName.ACCEPT_LENGTH,
)


def load_samples(session: Session, metrics: CampaignMetrics) -> dict[tuple[int, int, int], list[float]]:
    """The samples of the rows the model reads, keyed (trial, seq, index): one query by trial id."""
    trial_ids = sorted({m.trial_id for m in metrics.rows if m.name in SAMPLED_METRICS})
    if not trial_ids:
        return {}
    t = Metric.__table__  # type: ignore[attr-defined]
    found = session.connection().execute(
        select(t.c.trial_id, t.c.seq, t.c.index, cast(t.c.samples, Text)).where(
            t.c.trial_id.in_(trial_ids), t.c.name.in_(SAMPLED_METRICS), t.c.samples.is_not(None)
        )
    )
    out = {}
    for trial_id, seq, index, text in found:
        values = json.loads(text) if text else None
        if isinstance(values, list):
            out[(trial_id, seq, index)] = [float(x) for x in values]
    return out


def _accept_lengths(
    campaign: Campaign,
    metrics: CampaignMetrics,
    samples: dict,
    batch1: ModelInputs,
    grid_k: Sequence[int],
    set_aside: list[tuple[str, str]],
) -> dict[int, Measured]:
    """tau(k) per draft length, first found wins: entered per k on the campaign, measured by a speculative
    trial at that k (tag `draft_tokens`; untagged = the campaign's draft steps), derived from the entered
    per-position acceptance rates, the batch-1 accept length at the campaign's draft steps."""
    out: dict[int, Measured] = {}
    entered = campaign.accept_length_by_k or {}
    for k_text, tau in entered.items():
        if tau > int(k_text) + 1:  # k drafts and the bonus token: tau <= k + 1
            set_aside.append(
                (
                    f"accept length at {k_text} draft tokens (the entered {tau:g} is above {int(k_text) + 1}, "
                    "the most k draft tokens and the bonus token can give: set aside)",
                    "correct accept_length_by_k on the campaign",
                )
            )
            continue
        out.setdefault(int(k_text), Measured(float(tau), (), "entered on the campaign (accept length by draft tokens)"))
    steps = int(batch1.draft_steps.value) if batch1.draft_steps.value else None
    for m in metrics.newest(MetricName.ACCEPT_LENGTH):  # newest trial first
        k = m.tags.get("draft_tokens", steps)
        if k is not None and int(k) not in out:
            out[int(k)] = measured(
                m.value,
                samples.get((m.trial_id, m.seq, m.index)),
                f"trial #{m.trial_id} ({m.name}, measured at {int(k)} draft tokens)",
                m.trial_id,
            )
    alphas = campaign.accept_alphas or []
    for k in grid_k:
        if k not in out and k <= len(alphas):
            out[k] = Measured(
                accept_length_from_alphas(alphas, k),
                (),
                f"derived from the entered per-position acceptance rates ({', '.join(f'{a:g}' for a in alphas[:k])})",
            )
    if steps is not None and steps not in out and batch1.accept_length.value is not None:
        out[steps] = Measured(
            batch1.accept_length.value, (), batch1.accept_length.source, batch1.accept_length.trial_id
        )
    return out


def speculation_inputs(
    session: Session,
    campaign: Campaign,
    metrics: CampaignMetrics,
    approach_rows: list[Approach],
    samples: dict[tuple[int, int, int], list[float]] | None = None,
) -> SpeculationInputs:
    """Each approach's grid inputs from the campaign's metrics (its own, else the newest of the campaign's:
    at world size 1 a decode or draft step does not depend on the allreduce)."""
    samples = samples if samples is not None else load_samples(session, metrics)
    batch1 = model_inputs(session, campaign, metrics=metrics)

    def campaign_wide(name: str) -> list[MetricRow]:
        return _newest_trial_rows(_gpu(metrics.newest(name)))

    shared_decode = _by_point(campaign_wide(MetricName.DECODE_STEP_MS), samples, "plain decode step")
    if 1 not in shared_decode and batch1.t_base.value:
        shared_decode[1] = Measured(batch1.t_base.value, (), batch1.t_base.source, batch1.t_base.trial_id)
    shared_draft = _by_point(campaign_wide(MetricName.DRAFT_STEP_MS), samples, "draft head step")
    if 1 not in shared_draft and batch1.draft_step_ms.value is not None:
        shared_draft[1] = Measured(batch1.draft_step_ms.value, (), batch1.draft_step_ms.source)
    shared_verify = _verify_points(campaign_wide(MetricName.VERIFY_COMPUTE_MS), samples)
    steps = int(batch1.draft_steps.value) if batch1.draft_steps.value else campaign.verify_tokens - 1
    if (1, steps) not in shared_verify and batch1.verify_compute_ms.value is not None and steps >= 1:
        shared_verify[(1, steps)] = Measured(batch1.verify_compute_ms.value, (), batch1.verify_compute_ms.source)

    per_approach = []
    for a in approach_rows:
        assert a.id is not None
        own_decode = _by_point(
            _newest_trial_rows(_gpu(metrics.newest(MetricName.DECODE_STEP_MS, a.id))), samples, "plain decode step"
        )
        own_draft = _by_point(
            _newest_trial_rows(_gpu(metrics.newest(MetricName.DRAFT_STEP_MS, a.id))), samples, "draft head step"
        )
        verify_rows = _newest_trial_rows(_gpu(metrics.newest(MetricName.VERIFY_COMPUTE_MS, a.id)))
        own_verify = _verify_points(verify_rows, samples)
        curve_points = allreduce_curve(_gpu(metrics.newest(MetricName.ALLREDUCE_LATENCY_US, a.id)))
        tag_sets = [m.tags for m in verify_rows] + [p.tags for p in curve_points]
        world = max((int(tags.get("world_size") or 0) for tags in tag_sets), default=0)
        if verify_rows and all(m.tags.get("allreduces") == 0 for m in verify_rows):
            world = 1  # the verify step ran no allreduce (world size 1)
        if not own_verify and not curve_points:
            continue  # nothing of this approach measured: it is not on the grid
        rows_by_tags = {
            json.dumps(m.tags, sort_keys=True): m
            for m in metrics.newest(MetricName.ALLREDUCE_LATENCY_US, a.id)
            if curve_points and m.trial_id == curve_points[0].trial_id
        }
        curve = []
        for p in curve_points:
            row = rows_by_tags.get(json.dumps(p.tags, sort_keys=True))
            row_samples = samples.get((row.trial_id, row.seq, row.index)) if row else None
            label = f"trial #{p.trial_id} (allreduce_latency_us at {size_label(p.bytes)})"
            curve.append((p.bytes, measured(p.latency_us, row_samples, label, p.trial_id)))
        tags = curve_points[0].tags if curve_points else {}
        how = ", ".join(
            f"{k} {tags[k]}" for k in ("backend", "mode", "method", "world_size") if tags.get(k) is not None
        )
        per_approach.append(
            ApproachInputs(
                approach_id=a.id,
                key=a.key,
                title=a.title,
                status=a.status,
                t_base={**shared_decode, **own_decode},
                draft_step={**shared_draft, **own_draft},
                verify_compute={**shared_verify, **own_verify},
                curve=curve,
                curve_how=how,
                world_size=world or (1 if not curve_points else 2),
                deployable=a.status != ApproachStatus.dead_end,
            )
        )

    batches = tuple(campaign.speculation_batches or ()) or tuple(
        sorted(
            {b for ai in per_approach for (b, _k) in ai.verify_compute} | {b for ai in per_approach for b in ai.t_base}
        )
    )
    ks = tuple(campaign.speculation_draft_tokens or ()) or tuple(
        sorted({k for ai in per_approach for (_b, k) in ai.verify_compute})
    )
    set_aside: list[tuple[str, str]] = []
    n_ar = int(batch1.allreduces_per_verify.value) if batch1.allreduces_per_verify.value is not None else None
    return SpeculationInputs(
        batches=batches,
        draft_tokens=ks,
        n_ar=n_ar,
        hidden_size=campaign.hidden_size,
        tau=_accept_lengths(campaign, metrics, samples, batch1, ks, set_aside),
        approaches=tuple(per_approach),
        bytes_per_element=BYTES_PER_ELEMENT,
        draft_steps=int(batch1.draft_steps.value) if batch1.draft_steps.value else None,
        set_aside=tuple(set_aside),
    )


# The answer is a pure function of the campaign's model inputs, its approaches and the metric rows it reads
# (rows never change once stored), so a process keeps the last few: a page shown again with nothing new skips
# the bootstrap and the samples query. Keyed by everything the answer reads; bounded; shared by threads.
_CACHE: OrderedDict[str, SpeculationAnswer] = OrderedDict()
_CACHE_SIZE = 16
_CACHE_LOCK = threading.Lock()
_CAMPAIGN_KEY_FIELDS = (
    *MODEL_INPUT_FIELDS,
    "id",
    "baseline_trial_id",
    "input_sources",
    "accept_length_by_k",
    "accept_alphas",
    "speculation_batches",
    "speculation_draft_tokens",
)


def _cache_key(campaign: Campaign, metrics: CampaignMetrics, approach_rows: list[Approach], resamples: int) -> str:
    fields = {name: getattr(campaign, name) for name in _CAMPAIGN_KEY_FIELDS}
    rows = [(a.id, a.key, a.title, a.status, (a.recipe or {}).get("kind")) for a in approach_rows]
    traces = [(t.artifact_id, t.figures) for t in metrics.traces]
    return json.dumps([fields, rows, metrics.rows_key, traces, resamples], default=str, sort_keys=True)


def campaign_speculation(
    session: Session,
    campaign: Campaign,
    metrics: CampaignMetrics,
    approach_rows: list[Approach],
    *,
    resamples: int = RESAMPLES,
) -> SpeculationAnswer:
    """The answer over (batch, draft tokens) for a campaign, from metrics already read (the same inputs in
    this process give the answer computed before)."""
    key = _cache_key(campaign, metrics, approach_rows, resamples)
    with _CACHE_LOCK:
        found = _CACHE.get(key)
        if found is not None:
            _CACHE.move_to_end(key)
            return found
    spec = speculation_inputs(session, campaign, metrics, approach_rows)
    measurer = next(
        (a.key for a in approach_rows if isinstance(a.recipe, dict) and a.recipe.get("kind") == "sglang_server"), None
    )
    found = speculation_answer(spec, resamples=resamples, measurer=measurer)
    with _CACHE_LOCK:
        _CACHE[key] = found
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return found


def read_campaign_speculation(session: Session, campaign: Campaign) -> tuple[SpeculationAnswer, list[Approach]]:
    """The answer for a campaign read from the database (the API and the CLI; pages pass what they read)."""
    rows = approaches(session, campaign)
    return campaign_speculation(session, campaign, load_campaign_metrics(session, campaign), rows), rows
