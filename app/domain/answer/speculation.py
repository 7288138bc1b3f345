"""`speculation_answer`: the answer over (batch, draft tokens) composed from the grid's parts (cells.py, tiers.py,
missing.py, sentence.py), and `answer_json`, the document the API and the CLI give. Pure: `loader.py` reads a
campaign's inputs and `read.py` calls it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from app.domain.answer.cells import (
    _cells,
    _intervals,
    _intervals_of,
    _merge,
    _Model,
    _new_input,
    _Plan,
    _plan,
    _read_by,
    paired_runs,
)
from app.domain.answer.grid import (
    ACCEPT,
    RESAMPLES,
    ApproachAnswer,
    ApproachInputs,
    Cell,
    Interval,
    SpeculationAnswer,
    SpeculationInputs,
    _chosen,
)
from app.domain.answer.missing import _missing
from app.domain.answer.sentence import _sentence
from app.domain.answer.tiers import _BATCH_K, _speedup_value, _tiers
from app.domain.answer.values import Conditions, Value
from app.domain.statistics import (
    Rule,
)


def speculation_answer(
    spec: SpeculationInputs, *, resamples: int = RESAMPLES, seed: int = Rule.seed, measurer: str | None = None
) -> SpeculationAnswer:
    """The model over (batch, draft tokens) for every approach, with intervals, tiers and the sentence."""
    model = _Model()
    for k, tau in sorted(spec.tau.items()):
        model.add(tau, ACCEPT, "{} draft tokens", k)
    plans: list[_Plan] = []
    open_cells: list[list[Cell]] = []
    gaps: dict[str, list[str]] = {}
    for ai in spec.approaches:
        plan, opened, why = _plan(ai, spec, model)
        plans.append(plan)
        open_cells.append(opened)
        if why:
            gaps[ai.key] = why
    n_figures = len(model.values)
    sampled_mask = np.zeros(n_figures, dtype=bool)
    sampled_mask[model.sampled] = True
    once_mask = np.asarray(model.one_trial, dtype=bool)
    unstable_mask = np.asarray(model.unstable, dtype=bool)
    merged = _merge(plans)
    if plans:
        cell_figures, figures, replicates = _intervals(model, merged, spec.n_ar or 0, resamples, seed, spec.confidence)
        masks = (sampled_mask, once_mask, unstable_mask)
        built = _cells(spec, merged, cell_figures, model.values, figures[0], masks)
    else:
        figures, replicates, built = (np.array([]),) * 3, None, []
    cell_index: dict[tuple[str, int, int], int] = {}  # (approach, b, k) -> its row in the replicates
    for ai, plan in zip(spec.approaches, plans, strict=True):
        base_index = len(cell_index)
        cell_index.update(((ai.key, b, k), base_index + i) for i, (b, k) in enumerate(plan.cells))
    answers: list[ApproachAnswer] = []
    users: dict[int, set[str]] = defaultdict(set)
    at = 0
    for ai, plan, opened in zip(spec.approaches, plans, open_cells, strict=False):
        mine = _read_by(plan)
        cells = [*opened, *built[at : at + len(plan.cells)]]
        at += len(plan.cells)
        for p in mine:
            users[p].add(ai.key)
        answers.append(_approach_answer(ai, cells, spec, model, mine))
    figs = _figure_intervals(model, figures, sampled_mask, once_mask, unstable_mask)
    owner: list[str | None] = [None] * n_figures
    for pos, keys in users.items():
        if len(keys) == 1:
            owner[pos] = next(iter(keys))
    sources, labels = _sources_and_labels(model, spec)
    rows = zip(model.names, owner, figs, sources, (v.trial_ids for v in model.figures), labels, strict=True)
    inputs = list(map(_new_input, rows))
    tiers, tier_verdicts = _tiers(answers, cell_index, replicates, spec.confidence, spec.min_effect)
    return SpeculationAnswer(
        batches=spec.batches,
        draft_tokens=spec.draft_tokens,
        approaches=tuple(answers),
        tiers=tiers,
        inputs=tuple(inputs),
        missing=tuple(_missing(spec, gaps, measurer)),
        n_ar=spec.n_ar,
        tau={k: next(f.figure for f in inputs if f.name == f"{ACCEPT} at {k} draft tokens") for k in spec.tau},
        tau_sources={k: m.source for k, m in spec.tau.items()},
        sentence=_sentence(answers, tiers, _chosen(answers, tiers)),
        resamples=resamples,
        confidence=spec.confidence,
        conditions=spec.conditions,
        flags=spec.flags,
        min_effect=spec.min_effect,
        tier_verdicts=tier_verdicts,
        runs=paired[0] if (paired := paired_runs([model.figures[p] for p in model.sampled])) else 0,
    )


def _figure_intervals(
    model: _Model, figures: Any, sampled_mask: np.ndarray, once_mask: np.ndarray, unstable_mask: np.ndarray
) -> list[Interval]:
    """Each input figure's interval, in model order: the resampled ones' bounds, the others exact (no interval)."""
    n_figures = len(model.values)
    point, f_low, f_high = figures
    low, high = np.full(n_figures, np.nan), np.full(n_figures, np.nan)
    if len(f_low):
        low[model.sampled], high[model.sampled] = f_low, f_high
    measured_mask = np.asarray(model.measured, dtype=bool)
    return _intervals_of(
        point if len(point) else np.asarray(model.values, dtype=float),
        low,
        high,
        unstable_mask,
        sampled_mask if len(f_low) else np.zeros(n_figures, dtype=bool),
        ~measured_mask,
        once_mask,
        None if len(point) else model.values,
    )


def _approach_answer(
    ai: ApproachInputs, cells: list[Cell], spec: SpeculationInputs, model: _Model, mine: set[int]
) -> ApproachAnswer:
    """One approach's answer from its cells: the best draft tokens and speedup per batch, B* and the first batch
    that loses, the headline tau*, and the inputs it reads that are unstable."""
    cells.sort(key=_BATCH_K)
    by_batch: dict[int, list[Cell]] = {}
    for c in cells:
        if c.speedup is not None:
            by_batch.setdefault(c.batch, []).append(c)
    best_k: dict[int, int] = {}
    best_s: dict[int, Interval] = {}
    best_cell: dict[int, Cell] = {}
    for b in spec.batches:
        options = by_batch.get(b)
        if options:
            top = max(options, key=_speedup_value)
            best_s[b] = top.speedup  # type: ignore[assignment]
            # On only where the best cell pays by the interval rule (Cell.pays), as B* below: never the point.
            best_k[b] = top.draft_tokens if top.pays == "yes" else 0
            best_cell[b] = top
    # B*: the largest batch where the best draft length pays by the interval rule (Cell.pays), not by its
    # point estimate alone; above it, the first batch where it does not (or cannot be said to) pay.
    paying = [b for b, c in best_cell.items() if c.pays == "yes"]
    b_star = max(paying) if paying else None
    losing = [b for b, c in best_cell.items() if c.pays != "yes" and (b_star is None or b > b_star)]
    with_tau_star = [c for c in cells if c.tau_star is not None]
    headline_k = None
    tau_star_head = None
    if with_tau_star:
        b0 = min(c.batch for c in with_tau_star)
        at_b0 = {c.draft_tokens: c for c in with_tau_star if c.batch == b0}
        steps = spec.draft_steps
        headline_k = best_k.get(b0) or (int(steps) if steps and int(steps) in at_b0 else min(at_b0))
        headline_k = headline_k if headline_k in at_b0 else min(at_b0)
        tau_star_head = at_b0[headline_k].tau_star
    return ApproachAnswer(
        key=ai.key,
        title=ai.title,
        status=ai.status,
        deployable=ai.deployable,
        world_size=ai.world_size,
        cells=tuple(cells),
        tau_star=tau_star_head,
        headline_k=headline_k,
        best_draft_tokens=best_k,
        best_speedup=best_s,
        break_even_batch=b_star,
        first_losing_batch=min(losing) if losing else None,
        unstable_inputs=tuple(sorted({model.names[p] for p in mine if model.unstable[p]})),
        decision={b: c.pays or "unclear" for b, c in best_cell.items()},
    )


def _sources_and_labels(model: _Model, spec: SpeculationInputs) -> tuple[list[str], list[str]]:
    """Each input figure's source and conditions in words, in model order (a cell's `inputs` index these), each
    distinct one worded once."""
    sources: list[str] = []
    labels: list[str] = []
    source_of: dict[tuple[str, int], str] = {}
    label_of: dict[int, str] = {}  # id(Conditions) -> its label (the figures are alive for the whole call)
    label_by_value: dict[Conditions | None, str] = {}
    for v in model.figures:  # model order: a cell's `inputs` index this list
        key = (v.source, len(v.trials))
        source = source_of.get(key)
        if source is None:
            source = source_of[key] = _source(v, spec)
        sources.append(source)
        label = label_of.get(id(v.conditions))
        if label is None:
            label = label_by_value.get(v.conditions)
            if label is None:
                label = label_by_value[v.conditions] = _conditions_label(v.conditions)
            label_of[id(v.conditions)] = label
        labels.append(label)
    return sources, labels


def _conditions_label(c: Conditions | None) -> str:
    if c is None:
        return ""
    return f"{c.label}; {c.stack_label}" if c.stack_label else c.label


def _source(v: Value, spec: SpeculationInputs) -> str:
    """Where a figure comes from, in words: its trials (or "entered, exact"), and how many of them."""
    if v.exact:
        return f"{v.source} (exact: no trial measured it)" if v.source else "exact: no trial measured it"
    trials = len(v.trials)
    count = "one trial: within-run noise only" if trials == 1 else f"{trials} trials"
    return f"{v.source} ({count})"


def _figure(f: Interval | None) -> dict[str, Any] | None:
    return f.as_dict() if f is not None else None


def answer_json(answer: SpeculationAnswer) -> dict[str, Any]:
    """The answer as `GET /api/campaigns/{slug}/answer` and `campaign answer --json` give it."""
    return {
        "sentence": answer.sentence,
        "batches": list(answer.batches),
        "draft_tokens": list(answer.draft_tokens),
        "allreduces_per_verify": answer.n_ar,
        "confidence": answer.confidence,
        "resamples": answer.resamples,
        "paired_runs": answer.runs,
        "conditions": answer.conditions.key if answer.conditions else None,
        "conditions_label": answer.conditions.label if answer.conditions else None,
        "within_run_only": answer.within_run_only,
        "flags": list(answer.flags),
        "chosen": answer.chosen.key if answer.chosen else None,
        "tiers": [list(t) for t in answer.tiers],
        "indistinguishable": [list(t) for t in answer.tiers if len(t) > 1],  # kept: the tiers not shown to differ
        "tier_verdicts": {
            key: {
                "leader": v.leader,
                "verdict": str(v.verdict),
                "words": v.words,
                "ratio": v.ratio,
                "low": v.low,
                "high": v.high,
            }
            for key, v in answer.tier_verdicts.items()
        },
        "accept_length": [
            {"draft_tokens": k, **answer.tau[k].as_dict(), "source": answer.tau_sources[k]} for k in sorted(answer.tau)
        ],
        "approaches": [
            {
                "key": a.key,
                "title": a.title,
                "status": a.status,
                "world_size": a.world_size,
                "tau_star": _figure(a.tau_star),
                "tau_star_draft_tokens": a.headline_k,
                "break_even_batch": a.break_even_batch,
                "first_losing_batch": a.first_losing_batch,
                "best_draft_tokens": {str(b): k for b, k in sorted(a.best_draft_tokens.items())},
                "pays_by_batch": {str(b): d for b, d in sorted(a.decision.items())},
                "unstable_inputs": list(a.unstable_inputs),
                "by_batch": [
                    {
                        "batch": c.batch,
                        "draft_tokens": c.draft_tokens,
                        "t_base_ms": c.t_base_ms,
                        "t_draft_ms": c.t_draft_ms,
                        "t_verify_ms": c.t_verify_ms,
                        "t_ar_us": c.t_ar_us,
                        "verify_bytes": c.verify_bytes,
                        "tau_star": _figure(c.tau_star),
                        "speedup": _figure(c.speedup),
                        "pays": c.pays,
                        "verdict": str(c.verdict) if c.verdict is not None else None,
                        "note": c.note,
                    }
                    for c in a.cells
                ],
            }
            for a in answer.approaches
        ],
        "inputs": [
            {
                "name": f.name,
                "approach": f.approach,
                **f.figure.as_dict(),
                "source": f.source,
                "trials": list(f.trial_ids),
                "conditions": f.conditions,
            }
            for f in answer.inputs
        ],
        "missing": [
            {"what": m.what, "approach": m.approach, "how": m.how, "conditions": m.conditions} for m in answer.missing
        ],
    }
