"""The one loader of the batch model's inputs: measurements paired only under the same conditions.

Every decode step T_base(b), draft step, verify compute (b, k) and allreduce figure of the campaign is read with
its trial's stack (`answer_rows`: one query). A figure's conditions are its ConditionTag tags and its trial's
stack (`values.Conditions`); what must agree depends on the figure (`KEYS`): the decode and verify steps on world
size, mode, context, dtype, device and the model geometry (the same stand-in); the draft step on world size (the
target's TP: its recipe runs the head's collectives at that size), mode, context, dtype and device; the allreduce
curve on world size, mode, dtype and device; all of them on the stack. The decode and verify figures' distinct conditions are the campaign's *condition sets*
(`condition_sets`); the answer is given per set, and an input found only under other conditions is `Missing`,
never borrowed. Within a set, each input comes from the approach's own trials, else from the approach with the
newest agreeing trial; every agreeing trial of that approach is a replicate (the trial is the unit).

Accept length tau(k) is the model's and the draft head's, not the stand-in's: shared by every condition set. Per
k, first found wins: entered per k on the campaign, derived from the entered per-position acceptance rates (vLLM's
unconditional rates converted, and said), the campaign's typed accept length at its draft steps, measured by
speculative trials at that k (tag `draft_tokens`, chain
drafts: `speculative_topk` 1 or untagged; untagged trials are filed under the campaign's draft steps, and said),
the batch-1 loader's measured accept length at the campaign's draft steps. An entered (typed) acceptance takes precedence over a
measured one, and its source names the measurement it is used in place of. No FastAPI here.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Text, cast
from sqlalchemy import select as sa_select
from sqlmodel import Session

from app.domain.acceptance import conversion_words
from app.domain.answer.cells import bracket, interpolate_loglog
from app.domain.answer.grid import ApproachInputs, SpeculationInputs, accept_length_from_alphas
from app.domain.answer.inputs import ModelInputs, WhatIf
from app.domain.answer.metrics import is_cpu_floor, is_world_figure
from app.domain.answer.model import BYTES_PER_ELEMENT
from app.domain.answer.values import Conditions, Missing, Value, exact, of_trials
from app.domain.statistics import Rule, trial_estimates_many
from app.domain.units import size_label
from app.models import Approach, ApproachStatus, Campaign, Metric, Trial
from app.protocol.metrics import ConditionTag, MetricName

DECODE, DRAFT, VERIFY, ALLREDUCE = (
    MetricName.DECODE_STEP_MS,
    MetricName.DRAFT_STEP_MS,
    MetricName.VERIFY_COMPUTE_MS,
    MetricName.ALLREDUCE_LATENCY_US,
)
ANSWER_METRICS = (DECODE, DRAFT, VERIFY, ALLREDUCE, *MetricName.ACCEPT_LENGTH)
_STEP_KEYS = (*ConditionTag.PAIRING, *ConditionTag.GEOMETRY_KEYS)
# What each figure's conditions are made of (the stack always).
KEYS: dict[str, tuple[str, ...]] = {
    DECODE: _STEP_KEYS,
    VERIFY: _STEP_KEYS,
    DRAFT: (
        ConditionTag.WORLD_SIZE,
        ConditionTag.MODE,
        ConditionTag.CONTEXT,
        ConditionTag.DTYPE,
        ConditionTag.DEVICE,
        ConditionTag.DRAFT_VOCAB,
    ),
    ALLREDUCE: (ConditionTag.WORLD_SIZE, ConditionTag.MODE, ConditionTag.DTYPE, ConditionTag.DEVICE),
}
# A figure timed by the wall clock around a synchronize (`timer: wall-sync`, the recipes' `clock: wall`) is an
# independent check of the CUDA-event figure, not another model input (the recipes' contract).
CHECK_TIMERS = frozenset({"wall-sync"})


@dataclass(frozen=True)
class Row:
    """One metric row the answer may read, with its trial's conditions."""

    trial_id: int
    approach_id: int
    name: str
    value: float
    tags: dict[str, Any]
    samples: tuple[float, ...]
    conditions: Conditions


def answer_rows(session: Session, campaign: Campaign) -> list[Row]:
    """Every figure of the campaign the batch model may read (GPU, full geometry, world figures, the headline
    timer), newest trial first, with its trial's stack: one query."""
    m, t = Metric.__table__, Trial.__table__  # type: ignore[attr-defined]
    found = session.connection().execute(
        sa_select(
            m.c.trial_id,
            m.c.approach_id,
            m.c.name,
            m.c.value,
            cast(m.c.tags, Text),
            cast(m.c.samples, Text),
            cast(t.c.fingerprint, Text),
        )
        .join(t, t.c.id == m.c.trial_id)
        .where(m.c.campaign_id == campaign.id, m.c.name.in_(ANSWER_METRICS))
        .order_by(m.c.trial_id.desc(), m.c.seq, m.c.index)
    )
    fingerprints: dict[str | None, dict[str, Any] | None] = {}
    known: dict[tuple[Any, ...], Conditions] = {}
    out = []
    for trial_id, approach_id, name, value, tags_text, samples_text, fp_text in found:
        tags = json.loads(tags_text) if tags_text else {}
        if not isinstance(tags, dict) or not is_world_figure(tags) or is_cpu_floor(tags):
            continue
        if tags.get("timer") in CHECK_TIMERS or (name in MetricName.ACCEPT_LENGTH and value < 1):
            continue
        if fp_text not in fingerprints:
            fingerprints[fp_text] = json.loads(fp_text) if fp_text else None
        samples = json.loads(samples_text) if samples_text else None
        kept = tuple(float(x) for x in samples) if isinstance(samples, list) and samples else (float(value),)
        keys = KEYS.get(name, _STEP_KEYS)
        seen = (keys, tuple(tags.get(k) for k in keys), tags.get("context_len"), fp_text)
        conditions = known.get(seen)
        if conditions is None:  # a few distinct condition sets among thousands of rows
            conditions = known[seen] = Conditions.of(tags, fingerprints[fp_text], keys)
        out.append(Row(trial_id, approach_id, name, float(value), tags, kept, conditions))
    return out


def _batch(row: Row) -> int:
    return int(row.tags.get("batch") or 1)


def _verify_k(row: Row) -> int:
    k = row.tags.get(ConditionTag.DRAFT_TOKENS)
    if k is None:
        k = int(row.tags.get("tokens") or 0) // _batch(row) - 1
    return int(k)


def _set_key(row: Row) -> Conditions:
    return Conditions(row.conditions.tags, ())


def condition_sets(rows: Sequence[Row]) -> list[Conditions]:
    """The distinct conditions of the decode and verify figures, the most complete first (a set that states
    less and agrees with a fuller one is that one). Newest first among equals. The draft step's own condition,
    its draft vocabulary, splits a set: one set per draft vocabulary measured under it (`_by_draft_vocab`), so
    the answer never picks one silently."""
    seen: dict[Conditions, int] = {}
    for r in rows:
        if r.name == DECODE or (r.name == VERIFY and _verify_k(r) >= 1):
            seen.setdefault(_set_key(r), r.trial_id)
    ordered = sorted(seen, key=lambda c: (-len(c.tags), -seen[c]))
    kept: list[Conditions] = []
    for c in ordered:
        if not any(c.agrees(k) and set(c.tags) <= set(k.tags) for k in kept):
            kept.append(c)
    drafts = [r for r in rows if r.name == DRAFT and ConditionTag.DRAFT_VOCAB in r.conditions.tag_map]
    return [split for c in kept for split in _by_draft_vocab(c, drafts)]


def _by_draft_vocab(c: Conditions, drafts: Sequence[Row]) -> list[Conditions]:
    """`c` once per draft vocabulary of the draft steps measured under it (smallest first); `c` itself where
    none states one."""
    want = c.only(KEYS[DRAFT])
    vocabs = sorted({int(r.conditions.tag_map[ConditionTag.DRAFT_VOCAB]) for r in drafts if r.conditions.agrees(want)})
    return [c.merged(Conditions(((ConditionTag.DRAFT_VOCAB, v),))) for v in vocabs] or [c]


def _trials_agreeing(rows: list[Row], want: Conditions) -> list[Row]:
    """The rows of the newest agreeing trial and of every older trial that agrees with it (replicates)."""
    agreeing = [r for r in rows if r.conditions.agrees(want)]
    if not agreeing:
        return []
    newest = max(r.trial_id for r in agreeing)
    first = next(r for r in agreeing if r.trial_id == newest).conditions
    return [r for r in agreeing if r.conditions.agrees(first)]


def _points(rows: list[Row], point: Any, what: Any) -> dict[Any, Value]:
    """One Value per point (batch, (batch, k), bytes) over the trials that measured it."""
    by_point: dict[Any, dict[int, tuple[float, ...]]] = defaultdict(dict)
    conditions: dict[Any, Conditions] = {}
    for r in rows:
        p = point(r)
        if p is None:
            continue
        by_point[p].setdefault(r.trial_id, r.samples)
        conditions[p] = conditions[p].merged(r.conditions) if p in conditions else r.conditions
    points = list(by_point.items())
    ordered = [sorted(trials, reverse=True) for _p, trials in points]
    estimates = trial_estimates_many(
        [[trials[i] for i in ids] for (_p, trials), ids in zip(points, ordered, strict=True)]
    )
    out = {}
    for (p, trials), ids, estimate in zip(points, ordered, estimates, strict=True):
        listed = ", ".join(f"#{i}" for i in ids)
        out[p] = of_trials([trials[i] for i in ids], f"trial {listed} ({what(p)})", ids, conditions[p], estimate)
    return out


class _Pool:
    """The campaign's rows of one metric, by approach, newest trial first."""

    def __init__(self, rows: Sequence[Row], name: str) -> None:
        self.rows = [r for r in rows if r.name == name]
        self.by_approach: dict[int, list[Row]] = defaultdict(list)
        for r in self.rows:
            self.by_approach[r.approach_id].append(r)

    def own(self, approach_id: int, want: Conditions) -> list[Row]:
        return _trials_agreeing(self.by_approach.get(approach_id, []), want)

    def shared(self, want: Conditions) -> list[Row]:
        """The rows of the approach with the newest trial agreeing with `want`, and its agreeing replicates."""
        newest = next((r for r in self.rows if r.conditions.agrees(want)), None)
        return [] if newest is None else self.own(newest.approach_id, want)

    def elsewhere(self, want: Conditions) -> list[Row]:
        """Rows that exist only under other conditions (what the answer would have borrowed)."""
        return [r for r in self.rows if not r.conditions.agrees(want)]


def _params(conditions: Conditions, *keys: str) -> str:
    t = conditions.tag_map
    return ", ".join(f"{k}: {t[k]}" for k in keys if k in t)


def _elsewhere_note(rows: list[Row]) -> str:
    newest = rows[0]
    return f"measured only under other conditions ({newest.conditions.label}, trial #{newest.trial_id}): not borrowed"


def speculation_inputs(
    campaign: Campaign,
    batch1: ModelInputs,
    approach_rows: list[Approach],
    rows: Sequence[Row],
    conditions: Conditions | None,
    rule: Rule,
    what_if: WhatIf | None = None,
) -> SpeculationInputs:
    """The grid's inputs under one condition set (None: the campaign has no decode or verify figure), with a
    what-if laid over them (`_laid_over`): nothing stored changes."""
    what_if = what_if or WhatIf()
    want = conditions or Conditions()
    decode, draft, curves = (_Pool(rows, n) for n in (DECODE, DRAFT, ALLREDUCE))
    verify = _Pool([r for r in rows if r.name != VERIFY or _verify_k(r) >= 1], VERIFY)  # k = 0 is a decode step
    missing = _not_under(conditions, want, decode, draft, verify)
    flags: list[str] = []
    per_approach = []
    verify_shared = verify.shared(want)
    world_wanted = want.tag_map.get(ConditionTag.WORLD_SIZE)
    for a in approach_rows:
        assert a.id is not None
        own_verify = verify.own(a.id, want)
        want_curve = want.only(KEYS[ALLREDUCE])
        own_curve = curves.own(a.id, want_curve)
        if not own_verify and not own_curve:
            continue  # nothing of this approach measured under these conditions: not on this grid
        verify_rows = own_verify or verify_shared
        # The verify trials fix the stack (and any condition the set leaves unstated) for the rest.
        fixed = want.merged(verify_rows[0].conditions) if verify_rows else want
        decode_rows = decode.own(a.id, fixed) or decode.shared(fixed)
        draft_rows = draft.own(a.id, fixed.only(KEYS[DRAFT])) or draft.shared(fixed.only(KEYS[DRAFT]))
        curve_rows = curves.own(a.id, fixed.only(KEYS[ALLREDUCE]))
        curve, how, world, curve_rows = _allreduce_curve(curve_rows, verify_rows, world_wanted)
        t_base, draft_step = _points(decode_rows, _batch, _named(DECODE)), _points(draft_rows, _batch, _named(DRAFT))
        verify_compute = _points(
            verify_rows,
            lambda r: (_batch(r), _verify_k(r)),
            lambda p: f"verify_compute_ms at {p[0] * (p[1] + 1)} tokens",
        )
        _entered_at_batch_1(campaign, batch1, t_base, draft_step, verify_compute)
        per_approach.append(
            ApproachInputs(
                approach_id=a.id,
                key=a.key,
                title=a.title,
                status=a.status,
                t_base=t_base,
                draft_step=draft_step,
                verify_compute=verify_compute,
                curve=curve,
                curve_how=how,
                world_size=world or (1 if not curve_rows else 2),
                deployable=a.status != ApproachStatus.dead_end,
            )
        )
        flags += _step_flags(a, t_base, curve, batch1)
    batches, ks = _grid_axes(campaign, per_approach)
    set_aside: list[tuple[str, str]] = []
    tau = accept_lengths(campaign, rows, batch1, ks, set_aside, flags)
    n_ar = int(batch1.allreduces_per_verify.value) if batch1.allreduces_per_verify.value is not None else None
    draft_steps = int(batch1.draft_steps.value) if batch1.draft_steps.value else None
    if what_if.any():
        per_approach, tau, n_ar, draft_steps = _laid_over(what_if, per_approach, tau, n_ar, draft_steps, campaign)
    return SpeculationInputs(
        batches=batches,
        draft_tokens=ks,
        n_ar=n_ar,
        hidden_size=campaign.hidden_size,
        tau=tau,
        approaches=tuple(per_approach),
        bytes_per_element=BYTES_PER_ELEMENT,
        draft_steps=draft_steps,
        set_aside=tuple(set_aside),
        conditions=conditions,
        missing=tuple(dict.fromkeys(missing)),
        flags=tuple(dict.fromkeys(flags)),
        confidence=rule.confidence,
        min_effect=rule.min_effect,
    )


def _named(metric: str) -> Callable[[int], str]:
    """How a figure of `metric` at a batch is named in its source ("decode_step_ms at batch 4")."""
    return lambda b: f"{metric} at batch {b}"


def _grid_axes(campaign: Campaign, per_approach: list[ApproachInputs]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The grid's batches and draft lengths: the campaign's, else every one measured."""
    batches = tuple(campaign.speculation_batches or ()) or tuple(
        sorted(
            {b for ai in per_approach for (b, _k) in ai.verify_compute} | {b for ai in per_approach for b in ai.t_base}
        )
    )
    ks = tuple(campaign.speculation_draft_tokens or ()) or tuple(
        sorted({k for ai in per_approach for (_b, k) in ai.verify_compute})
    )
    return batches, ks


def _not_under(
    conditions: Conditions | None, want: Conditions, decode: _Pool, draft: _Pool, verify: _Pool
) -> list[Missing]:
    """The step inputs measured under none of these conditions: where they were measured instead, and how to
    measure them here."""
    missing: list[Missing] = []
    run = _params(want, ConditionTag.WORLD_SIZE, ConditionTag.MODE, ConditionTag.CONTEXT, ConditionTag.DTYPE)
    for what, pool, keys, how in (
        ("plain decode step", decode, _STEP_KEYS, "the verify_step recipe (`batches`, draft_tokens [0])"),
        ("draft step", draft, KEYS[DRAFT], "the draft_step recipe (`batches`, `world_size`)"),
        ("verify compute", verify, _STEP_KEYS, "the verify_step recipe (`batches`, `draft_tokens` 1-7)"),
    ):
        if conditions is None or any(r.conditions.agrees(want.only(keys)) for r in pool.rows):
            continue
        other = pool.elsewhere(want.only(keys))
        found_where = _elsewhere_note(other) if other else "not measured under any conditions"
        missing.append(
            Missing(
                f"{what} under these conditions",
                f"{found_where}; run {how} with {run or 'these conditions'}",
                None,
                want.label,
            )
        )
    return missing


def _allreduce_curve(
    curve_rows: list[Row], verify_rows: list[Row], world_wanted: Any
) -> tuple[list[tuple[int, Value]], str, int, list[Row]]:
    """An approach's allreduce curve over message sizes (graph mode where measured), how it was measured in words,
    its world size (1: its verify step runs no allreduce, and it has no curve) and the rows it is read from."""
    world = int(world_wanted or 0) or max((int(r.tags.get("world_size") or 0) for r in curve_rows), default=0)
    if verify_rows and all(r.tags.get("allreduces") == 0 for r in verify_rows):
        world = 1  # the verify step ran no allreduce (world size 1)
    if world <= 1:
        curve_rows = []
    elif curve_rows:
        mode = max(curve_rows, key=lambda r: r.tags.get("mode") == "graph").tags.get("mode")
        curve_rows = [
            r for r in curve_rows if r.tags.get("mode") == mode and isinstance(r.tags.get("bytes"), (int, float))
        ]
    curve = [
        (int(b), v)
        for b, v in sorted(
            _points(
                curve_rows, lambda r: int(r.tags["bytes"]), lambda b: f"allreduce_latency_us at {size_label(b)}"
            ).items()
        )
    ]
    tags = curve_rows[0].tags if curve_rows else {}
    how = ", ".join(f"{k} {tags[k]}" for k in ("backend", "mode", "method", "world_size") if tags.get(k) is not None)
    if how:
        curve = [(b, _with_source(v, f"{v.source}; {how}")) for b, v in curve]
    return curve, how, world, curve_rows


def _entered_at_batch_1(
    campaign: Campaign,
    batch1: ModelInputs,
    t_base: dict[int, Value],
    draft_step: dict[int, Value],
    verify_compute: dict[tuple[int, int], Value],
) -> None:
    """Entered batch-1 figures (exact, no conditions: the campaign's own) fill batch 1 where nothing measured it;
    the batch-1 loader's *measured* picks are not used here (they were chosen whatever their conditions)."""
    if 1 not in t_base and batch1.t_base.value and batch1.t_base.trial_id is None:
        t_base[1] = exact(batch1.t_base.value, batch1.t_base.source)
    if 1 not in draft_step and batch1.draft_step_ms.value is not None and batch1.draft_step_ms.trial_id is None:
        draft_step[1] = exact(batch1.draft_step_ms.value, batch1.draft_step_ms.source)
    steps = int(batch1.draft_steps.value) if batch1.draft_steps.value else campaign.verify_tokens - 1
    entered_verify = batch1.verify_compute_ms
    if (
        steps >= 1
        and (1, steps) not in verify_compute
        and entered_verify.value is not None
        and entered_verify.trial_id is None
    ):
        verify_compute[(1, steps)] = exact(entered_verify.value, entered_verify.source)


WHAT_IF = "what-if"


def _laid_over(
    what_if: WhatIf,
    approaches: list[ApproachInputs],
    tau: dict[int, Value],
    n_ar: int | None,
    draft_steps: int | None,
    campaign: Campaign,
) -> tuple[list[ApproachInputs], dict[int, Value], int | None, int | None]:
    """The what-if over the grid's inputs: allreduces per verify everywhere; the accept length at the draft
    steps (the what-if's, else the campaign's); the batch-1 figures (baseline tok/s as T_base = 1000 / tok/s,
    ms per draft step, verify compute at the draft steps) at batch 1, where the batch-1 model reads them. Each
    value is exact and its source says "what-if". Verify tokens is the batch-1 report's: the grid's verify sizes
    are b (k + 1)."""
    if what_if.allreduces_per_verify is not None:
        n_ar = int(what_if.allreduces_per_verify)
    if what_if.draft_steps is not None:
        draft_steps = int(what_if.draft_steps)
    steps = draft_steps or campaign.verify_tokens - 1
    tau = dict(tau)
    if what_if.accept_length is not None and steps >= 1:
        tau[steps] = exact(what_if.accept_length, WHAT_IF)
    out = []
    for ai in approaches:
        t_base, draft, verify = dict(ai.t_base), dict(ai.draft_step), dict(ai.verify_compute)
        if what_if.baseline_tok_s:
            t_base[1] = exact(1000.0 / what_if.baseline_tok_s, f"{WHAT_IF}: 1000 / {what_if.baseline_tok_s:g} tok/s")
        if what_if.draft_step_ms is not None:
            draft[1] = exact(what_if.draft_step_ms, WHAT_IF)
        if what_if.verify_compute_ms is not None and steps >= 1:
            verify[(1, steps)] = exact(what_if.verify_compute_ms, WHAT_IF)
        out.append(dataclasses.replace(ai, t_base=t_base, draft_step=draft, verify_compute=verify))
    return out, tau, n_ar, draft_steps


def _with_source(v: Value, source: str) -> Value:
    return dataclasses.replace(v, source=source)


def _step_flags(
    a: Approach, t_base: dict[int, Value], curve: list[tuple[int, Value]], batch1: ModelInputs
) -> list[str]:
    """A decode step at batch b contains N_ar allreduces of its own size, b x hidden x 2 bytes (never the verify
    step's b(k+1) x hidden x 2): their total cannot exceed the step. t_ar at that size from the measured curve,
    exact or log-log between the measured sizes around it (`grid.bracket`); outside them no check."""
    n_ar = batch1.allreduces_per_verify.value
    if not n_ar or not curve:
        return []
    out = []
    sizes = [b for b, _v in curve]
    for b, base in sorted(t_base.items()):
        nbytes = b * batch1.hidden_size * BYTES_PER_ELEMENT
        br = bracket(sizes, nbytes)
        lo, hi = curve[br.lo][1].value, curve[br.hi][1].value
        if br.outside or not lo or not hi or not base.value:
            continue
        t_ar = float(interpolate_loglog(lo, hi, br.frac))
        if n_ar * t_ar / 1000.0 > base.value:
            how = (
                f"at {size_label(nbytes)}"
                if br.lo == br.hi
                else f"at {size_label(nbytes)}, log-log between {size_label(sizes[br.lo])} and {size_label(sizes[br.hi])}"
            )
            out.append(
                f"{a.title}: {int(n_ar)} allreduces x {t_ar:.1f} us ({how}, the decode step's size) = "
                f"{n_ar * t_ar / 1000.0:.1f} ms, longer than the {base.value:.1f} ms decode step at batch {b} that "
                "contains them: N_ar, t_ar or the step is wrong"
            )
    return out


def _accept_rows(rows: Sequence[Row]) -> dict[int, list[Row]]:
    """Each trial's best-ranked accept-length row (MetricName.ACCEPT_LENGTH's order) per draft length it
    tags (a live engine's window gives tau(j) for every j up to its k), by approach, newest trial first."""
    best: dict[tuple[int, object], Row] = {}
    for r in rows:
        if r.name in MetricName.ACCEPT_LENGTH:
            key = (r.trial_id, r.tags.get(ConditionTag.DRAFT_TOKENS))
            have = best.get(key)
            if have is None or MetricName.ACCEPT_LENGTH.index(r.name) < MetricName.ACCEPT_LENGTH.index(have.name):
                best[key] = r
    out: dict[int, list[Row]] = defaultdict(list)
    for key in sorted(best, key=lambda k: k[0], reverse=True):
        out[best[key].approach_id].append(best[key])
    return out


def _measured_accept_lengths(
    rows: Sequence[Row], steps: int | None, flags: list[str]
) -> dict[int, dict[int, list[Row]]]:
    """The measured accept lengths usable by the chain model, by k then approach: top-k 1 and at most k + 1 (the
    others flagged); an untagged one is filed under the campaign's draft steps."""
    measured: dict[int, dict[int, list[Row]]] = defaultdict(lambda: defaultdict(list))  # k -> approach -> rows
    for approach_rows in _accept_rows(rows).values():
        for r in approach_rows:
            topk = r.tags.get(ConditionTag.TOPK)
            tagged = r.tags.get(ConditionTag.DRAFT_TOKENS)
            found_k = int(tagged) if tagged is not None else steps
            if found_k is None:
                continue
            k = found_k
            if topk is not None and int(topk) != 1:
                flags.append(
                    f"trial #{r.trial_id}'s accept length {r.value:.2f} ran top-k {topk} (a tree draft): the chain "
                    "model reads top-k 1, so it is not used"
                )
                continue
            if r.value > k + 1:
                flags.append(
                    f"trial #{r.trial_id}'s accept length {r.value:.2f} is above k + 1 = {k + 1} "
                    f"({'its draft_tokens tag' if tagged is not None else 'untagged: filed under the draft steps'}): "
                    "set aside"
                )
                continue
            measured[k][r.approach_id].append(r)
    return measured


def accept_lengths(
    campaign: Campaign,
    rows: Sequence[Row],
    batch1: ModelInputs,
    grid_k: Sequence[int],
    set_aside: list[tuple[str, str]],
    flags: list[str],
) -> dict[int, Value]:
    """tau(k) per draft length, first found wins (the module docstring's order)."""
    out: dict[int, Value] = {}
    for k_text, tau in (campaign.accept_length_by_k or {}).items():
        if tau > int(k_text) + 1:  # k drafts and the bonus token: tau <= k + 1
            set_aside.append(
                (
                    f"accept length at {k_text} draft tokens (the entered {tau:g} is above {int(k_text) + 1}, "
                    "the most k draft tokens and the bonus token can give: set aside)",
                    "correct accept_length_by_k on the campaign",
                )
            )
            flags.append(f"entered accept length {tau:g} at k = {k_text} is above k + 1 = {int(k_text) + 1}")
            continue
        out.setdefault(int(k_text), exact(float(tau), "entered on the campaign (accept length by draft tokens)"))
    alphas = campaign.accept_alphas or []
    unconditional = campaign.accept_unconditional
    how = f"; {conversion_words(unconditional)}" if unconditional else ""
    for k in grid_k:
        if k not in out and k <= len(alphas):
            out[k] = exact(
                accept_length_from_alphas(alphas, k),
                f"derived from the entered per-position acceptance rates ({', '.join(f'{a:g}' for a in alphas[:k])})"
                + how,
            )
    steps = int(batch1.draft_steps.value) if batch1.draft_steps.value else None
    typed = batch1.accept_length
    if steps is not None and steps not in out and typed.value is not None and typed.trial_id is None:
        out[steps] = exact(typed.value, typed.source)  # the campaign's accept length, typed: at its draft steps
    measured = _measured_accept_lengths(rows, steps, flags)
    for k, by_approach in sorted(measured.items()):
        newest = max(by_approach.values(), key=lambda rs: rs[0].trial_id)
        untagged = newest[0].tags.get(ConditionTag.DRAFT_TOKENS) is None
        ids = [r.trial_id for r in newest]
        listed = ", ".join(f"#{i}" for i in ids)
        where = "untagged, filed under the campaign's draft steps" if untagged else "its draft_tokens tag"
        found = of_trials(
            [(r.value,) for r in newest], f"trial {listed} ({newest[0].name} at {k} draft tokens, {where})", ids
        )
        entered = out.get(k)
        if entered is None:
            out[k] = found
            continue
        if "used in place of the measured" in entered.source:  # the batch-1 input's own note already says it
            continue
        # An entered (typed) acceptance takes precedence over a measured one; the source says the other exists.
        out[k] = dataclasses.replace(
            entered,
            source=f"{entered.source}; used in place of the measured {found.value:.3g} (trial {listed}): an "
            "entered acceptance takes precedence, clear it to use the measurement",
        )
    if steps is not None and steps not in out and batch1.accept_length.value is not None:
        out[steps] = exact(batch1.accept_length.value, batch1.accept_length.source, batch1.accept_length.trial_id)
    return out
