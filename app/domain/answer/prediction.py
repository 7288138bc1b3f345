"""The answer checked against a real engine (issue 42, item 3): every (batch, draft tokens) cell a `vllm_server`
trial measured shows the engine's measured speedup beside what the answer predicts, and says *held* or
*missed by x%*. A missed prediction is shown, never hidden.

Per cell (one engine condition set: engine, release, model, method, dtype, mode, prompts, lengths, sampling, and
the trial's stack; batch b and draft tokens k):

    measured     engine_speedup: spec-on over spec-off output tok/s of the same trial's adjacent windows.
                 A trial is one observation: two or more trials give an interval over trials; one trial gives
                 its within-trial spread, said so (`one_trial`).
    A  engine's counting   tau x T_off / T_on, every figure the engine's own from the same trials: tau the
                 engine's accept length at k, T_off and T_on its step times (engine_step_ms, method
                 iteration-counter, spec off | on). An internal check: the step counting against the tok/s.
    B  stand-in compute    the answer's formula (model.speedup) with the stand-in's compute at the engine's
                 geometry (verify_step, geometry llama): tau x decode(b) / (T_draft + verify(b, k)), where
                 decode(b) is decode_step_ms at b tokens and verify(b, k) verify_compute_ms at b(k+1).
    C  stand-in + overhead B with the engine's per-step overhead as an input of its own:
                 tau x (decode(b) + overhead(b)) / (T_draft + verify(b, k) + overhead(b)).

The engine's per-step overhead (`overhead(b)`): the engine's spec-off step time minus the stand-in's decode
compute at the same batch (b tokens): scheduling, input preparation, sampling, detokenizing. It comes from the
spec-off windows only, so C uses nothing of the spec-on step it predicts but tau.

T_draft, the n-gram drafter's cost: an n-gram drafter has no kernel to time; its cost is the engine's, measured:
what a spec-on step costs beyond its verify compute and the overhead, `T_on - verify(b, k) - overhead(b)`
(the drafter plus speculation's own bookkeeping: rejection sampling, draft buffers). Taken from the same
trial it would make C reproduce T_on by construction, so a cell takes it from *another* engine cell at the same
batch under the same conditions (the nearest other k; its source trial named). Where the engine measured no
other k at that batch, T_draft is counted 0 and the cell says so (a lower bound on the spec-on step).

The rule (docs/profitability.md, "Checked against the engine"): a prediction *held* when its interval overlaps the
measured one (a figure without an interval is its own point); else it *missed by x%*, x = (predicted -
measured) / measured on the point estimates. Intervals: the statistics home's hierarchical resamples of each
figure (trials, then samples), at the campaign's confidence, propagated through the formula.

Pairing: engine trials are replicates only under the same engine conditions and stack. The stand-in pairs with an
engine cell only where every pairing and geometry condition both state agrees (dtype spelled either way), the
stand-in's geometry is llama, and the stacks agree; a stand-in figure under other conditions is never borrowed.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

import numpy as np
from sqlalchemy import Text, cast
from sqlalchemy import select as sa_select
from sqlmodel import Session

from app.domain.answer import model as formula
from app.domain.answer.grid import Interval
from app.domain.answer.metrics import is_world_figure
from app.domain.answer.values import Conditions, Value, of_trials, standin_label
from app.domain.statistics import Rule, percentile_intervals, trial_resamples_many
from app.models import Campaign, Metric, Trial
from app.protocol.metrics import ConditionTag
from app.protocol.metrics import MetricName as M

RECIPE = "vllm_server"
GEOMETRY = "llama"
COUNTING = "iteration-counter"  # the engine_step_ms method the predictions read
STEP_METHODS = (COUNTING, "tpot-x-tokens-per-step")
RESAMPLES = 400  # as the grid's (grid.RESAMPLES): bounds within about 1% of 1,000 resamples
SEED = 20261205
# What makes two engine trials replicates (besides the trial's stack); batch and draft tokens are the cell.
ENGINE_KEYS = (
    "engine",
    "engine_version",
    "model",
    "speculative_method",  # the vllm_server recipe's name for it (its `method` tags name measurement methods)
    "method",
    "dtype",
    "mode",
    "prompt_set",
    "input_len",
    "output_len",
    "prefix_caching",
    "temperature",
    "ignore_eos",
)
STANDIN_KEYS = (*ConditionTag.PAIRING, *ConditionTag.GEOMETRY_KEYS)
ENGINE_METRICS = (M.ENGINE_SPEEDUP, M.ENGINE_STEP_MS, M.ENGINE_ACCEPT_LENGTH)
STANDIN_METRICS = (M.DECODE_STEP_MS, M.VERIFY_COMPUTE_MS)
# The engines' dtype names as the stand-ins spell them.
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}
# Accept lengths a run derives for shorter drafts than it ran (engine_acceptance's tau(j < k)) are not the k run's.
DERIVED_SHORTER = "1 + sum of per-position rates"

ENGINE_COUNTING, STANDIN, STANDIN_OVERHEAD = "engine's counting", "stand-in compute", "stand-in + engine overhead"
RULE = (
    "held: the prediction's interval overlaps the measured one (a figure without an interval is its own point); "
    "missed by x%: (predicted - measured) / measured"
)


@dataclass(frozen=True)
class _Row:
    trial_id: int
    name: str
    value: float
    tags: dict[str, Any]
    samples: tuple[float, ...]
    conditions: Conditions


@dataclass(frozen=True)
class Figure:
    """A figure of the check: its interval, the trials it comes from, and how it was obtained."""

    interval: Interval
    trials: tuple[int, ...]
    source: str


@dataclass(frozen=True)
class Prediction:
    """One prediction of a cell's speedup: `figure` None when an input is missing (`missing` says which)."""

    name: str
    figure: Figure | None
    held: bool | None
    off_by: float | None  # (predicted - measured) / measured
    missing: str = ""
    note: str = ""

    @property
    def words(self) -> str:
        """ "held (off by +2.1%)", "missed by -41.3%", or what is missing; a figure read from an input whose
        spread is above the statistics home's unstable CV says so: wide intervals make "held" a weak test."""
        if self.figure is None or self.held is None or self.off_by is None:
            return f"not predicted: {self.missing}" if self.missing else "not predicted"
        pct = round(self.off_by * 100, 1)
        shown = f"{pct:+.1f}%" if pct else "0.0%"  # never "-0.0%"
        weak = (
            f"; unstable inputs (spread above {Rule.unstable_cv:.0%}): a weak test"
            if self.figure.interval.unstable
            else ""
        )
        return f"held (off by {shown}{weak})" if self.held else f"missed by {shown}{weak}"


@dataclass(frozen=True)
class CheckCell:
    """One engine cell: the measured speedup and its predictions, with the inputs they read."""

    batch: int
    draft_tokens: int
    conditions: Conditions
    trials: tuple[int, ...]
    measured: Figure
    one_trial: bool
    predictions: tuple[Prediction, ...]
    tau: Figure | None
    step_off_ms: Figure | None
    step_on_ms: Figure | None
    decode_ms: Figure | None  # the stand-in's, at b tokens
    verify_ms: Figure | None  # the stand-in's, at b(k+1) tokens
    overhead_ms: Figure | None  # the engine's per-step overhead: an input of the answer
    drafter_ms: Figure | None  # the n-gram drafter's cost, the engine's, from another cell (None: counted 0)
    standin: str  # the stand-in's conditions in words, or why none paired

    @property
    def label(self) -> str:
        return engine_label(self.conditions)


@dataclass(frozen=True)
class EngineCheck:
    """The campaign's engine cells, or what is missing for a check (never silently empty)."""

    cells: tuple[CheckCell, ...]
    missing: tuple[str, ...] = ()
    confidence: float = Rule.confidence
    rule: str = RULE
    overheads: tuple[tuple[int, Figure], ...] = field(default=())  # (batch, overhead) as inputs of the answer

    @property
    def held(self) -> int:
        return sum(1 for c in self.cells for p in c.predictions if p.held)

    @property
    def missed(self) -> int:
        return sum(1 for c in self.cells for p in c.predictions if p.held is False)


def engine_label(conditions: Conditions) -> str:
    """ "vllm 0.32.0, tiny-llama, ngram, bf16, eager, input 128, output 64"."""
    t = conditions.tag_map
    parts = [" ".join(str(t[k]) for k in ("engine", "engine_version") if k in t)]
    if "model" in t:  # a path names where the weights lie, not the model: its last part
        parts.append(PurePath(str(t["model"])).name or str(t["model"]))
    parts += [str(t[k]) for k in ("speculative_method", "method", "dtype", "mode", "prompt_set") if k in t]
    parts += [f"{k.split('_')[0]} {t[k]}" for k in ("input_len", "output_len") if k in t]
    if "temperature" in t:
        parts.append(f"temperature {t['temperature']}")
    return ", ".join(p for p in parts if p) or "conditions not stated"


# ---- reading ------------------------------------------------------------------------------------------


def _read_rows(session: Session, campaign: Campaign) -> tuple[list[_Row], list[_Row]]:
    """The campaign's engine rows and stand-in rows (llama geometry), each with its trial's conditions."""
    m, t = Metric.__table__, Trial.__table__  # type: ignore[attr-defined]
    found = session.connection().execute(
        sa_select(m.c.trial_id, m.c.name, m.c.value, cast(m.c.tags, Text), cast(m.c.samples, Text))
        .add_columns(cast(t.c.fingerprint, Text))
        .join(t, t.c.id == m.c.trial_id)
        .where(m.c.campaign_id == campaign.id, m.c.name.in_((*ENGINE_METRICS, *STANDIN_METRICS)))
        .order_by(m.c.trial_id.desc(), m.c.seq, m.c.index)
    )
    engine, standin = [], []
    for trial_id, name, value, tags_text, samples_text, fp_text in found:
        tags = json.loads(tags_text) if tags_text else {}
        if not isinstance(tags, dict) or not is_world_figure(tags) or tags.get("timer") == "wall-sync":
            continue
        fp = json.loads(fp_text) if fp_text else None
        raw = json.loads(samples_text) if samples_text else None
        samples = tuple(float(x) for x in raw) if isinstance(raw, list) and raw else (float(value),)
        if name in ENGINE_METRICS:
            if "batch" not in tags:
                continue
            engine.append(_Row(trial_id, name, float(value), tags, samples, Conditions.of(tags, fp, ENGINE_KEYS)))
        elif tags.get(ConditionTag.GEOMETRY) == GEOMETRY:
            standin.append(_Row(trial_id, name, float(value), tags, samples, Conditions.of(tags, fp, STANDIN_KEYS)))
    return engine, standin


def _pairing(engine: Conditions, tags: dict[str, Any]) -> Conditions:
    """The engine cell's conditions as the stand-ins state theirs: dtype in the stand-ins' spelling, and the
    pairing and geometry conditions the engine's tags state (an engine that states no geometry pairs on the rest)."""
    stated = {k: tags[k] for k in STANDIN_KEYS if tags.get(k) is not None and k != ConditionTag.STANDIN}
    if ConditionTag.DTYPE in stated:
        stated[ConditionTag.DTYPE] = DTYPES.get(str(stated[ConditionTag.DTYPE]), stated[ConditionTag.DTYPE])
    return Conditions(Conditions.of(stated, None, STANDIN_KEYS).only(tuple(stated)).tags, engine.stack)


def _trial_samples(rows: Sequence[_Row]) -> dict[int, tuple[float, ...]]:
    by: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        by[r.trial_id].extend(r.samples)
    return {tid: tuple(s) for tid, s in by.items()}


def _value(rows: Sequence[_Row], source: str) -> Value | None:
    per = _trial_samples(rows)
    if not per:
        return None
    ids = sorted(per)
    return of_trials([per[i] for i in ids], source, ids)


# ---- the check -----------------------------------------------------------------------------------------


def engine_check(session: Session, campaign: Campaign) -> EngineCheck:
    """The campaign's engine cells with their predictions (module docstring), or what is missing."""
    engine_rows, standin_rows = _read_rows(session, campaign)
    confidence = float(getattr(campaign, "stats_confidence", None) or Rule.confidence)
    if not any(r.name == M.ENGINE_SPEEDUP for r in engine_rows):
        return EngineCheck(
            (),
            (
                f"no {RECIPE} trial with an engine speedup (engine_speedup) in this campaign: run the {RECIPE} "
                "recipe (speculation off and on, interleaved) to check the answer against the engine",
            ),
            confidence,
        )
    # A trial's cell is named by its speedup rows (their `method` is the speculative one; a step time's `method`
    # may name its timing method instead): every engine row of that trial at the same batch and k belongs to it.
    named: dict[tuple[int, int, int], Conditions] = {}
    for r in engine_rows:
        if r.name == M.ENGINE_SPEEDUP:
            named.setdefault((r.trial_id, *_point(r)), r.conditions)
    cells: dict[tuple[Conditions, int, int], list[_Row]] = defaultdict(list)
    for r in engine_rows:
        b, k = _point(r)
        if r.tags.get("spec") == "off":  # a spec-off window has no k of its own (none, or 0): every k of its batch
            for trial_id, bb, kk in named:
                if (trial_id, bb) == (r.trial_id, b):
                    cells[(named[(trial_id, bb, kk)], bb, kk)].append(r)
        elif (cond := named.get((r.trial_id, b, k))) is not None:
            cells[(cond, b, k)].append(r)
    rng = np.random.default_rng(SEED)
    built: list[CheckCell] = []
    missing: list[str] = []
    if not standin_rows:
        missing.append(
            "no stand-in at the engine's geometry (verify_step with geometry llama, draft tokens 0 and k): "
            "the stand-in predictions cannot be made"
        )
    drafters = _drafters(cells, standin_rows, rng)
    for (cond, b, k), rows in sorted(cells.items(), key=lambda kv: (engine_label(kv[0][0]), kv[0][1], kv[0][2])):
        if not any(r.name == M.ENGINE_SPEEDUP for r in rows):
            continue
        built.append(_cell(cond, b, k, rows, standin_rows, drafters, rng, confidence))
    overheads = tuple(
        (c.batch, c.overhead_ms)
        for c in built
        if c.overhead_ms is not None and c.overhead_ms.interval.value > 0 and c.draft_tokens == min_k(built, c)
    )
    return EngineCheck(tuple(built), tuple(missing), confidence, RULE, overheads)


def _point(r: _Row) -> tuple[int, int]:
    """(batch, k); k is -1 where the row states none (a spec-off window's figures)."""
    return int(r.tags["batch"]), int(r.tags.get(ConditionTag.DRAFT_TOKENS, -1))


def step_method(tags: dict[str, Any]) -> str:
    """How an engine_step_ms figure was timed: its `step_method` tag, else its `method` where that names a timing
    method (the metric's comment tags `method`, which also names the speculative method elsewhere), else counting."""
    if tags.get("step_method"):
        return str(tags["step_method"])
    return str(tags["method"]) if tags.get("method") in STEP_METHODS else COUNTING


def min_k(cells: Sequence[CheckCell], cell: CheckCell) -> int:
    """The smallest k measured at the cell's batch under its conditions (one overhead per batch is listed)."""
    return min(c.draft_tokens for c in cells if c.batch == cell.batch and c.conditions == cell.conditions)


@dataclass(frozen=True)
class _Standin:
    decode: Value | None
    verify: Value | None
    label: str
    missing: str


def _standin_for(cond: Conditions, tags: dict[str, Any], b: int, k: int, rows: Sequence[_Row]) -> _Standin:
    """The stand-in's decode at b tokens and verify at b(k+1) under conditions agreeing with the engine's, from
    the newest agreeing trial and older trials under its very conditions (replicates); never another set."""
    want = _pairing(cond, tags)
    agreeing = [r for r in rows if r.conditions.agrees(want)]
    if not agreeing:
        why = want.disagreement(rows[0].conditions) if rows else None  # the engine's first
        return _Standin(
            None,
            None,
            "",
            f"no llama stand-in under the engine's conditions (engine vs stand-in: {why or 'none measured'})",
        )
    geometries = {r.conditions.only(ConditionTag.GEOMETRY_KEYS).tags for r in agreeing}
    if len(geometries) > 1:
        return _Standin(
            None,
            None,
            "",
            f"{len(geometries)} stand-in geometries agree with an engine trial that states none: "
            "tag the engine's geometry (hidden_size, layers, ffn_size, kv_heads) to pick one",
        )
    # Several contexts: the one nearest the engine's mean decode context (input + half the output).
    target = float(tags.get("input_len") or 0) + float(tags.get("output_len") or 0) / 2
    sets = {r.conditions for r in agreeing}
    chosen = min(
        sets,
        key=lambda c: (abs(float(c.tag_map.get(ConditionTag.CONTEXT, target)) - target), -_newest(agreeing, c)),
    )
    mine = [r for r in agreeing if r.conditions == chosen]
    # The recipe's own words ("Llama stand-in: grouped-query attention (4 heads, 4 KV heads), SwiGLU MLP 256, ...").
    label = str(mine[0].tags.get("standin_label") or standin_label(chosen.tag_map) or "llama stand-in")
    if ConditionTag.CONTEXT in chosen.tag_map:
        label += f", context {chosen.tag_map[ConditionTag.CONTEXT]}"
    decode_rows = [r for r in mine if r.name == M.DECODE_STEP_MS and int(r.tags.get("batch") or 1) == b]
    verify_rows = [
        r
        for r in mine
        if r.name == M.VERIFY_COMPUTE_MS
        and int(r.tags.get("batch") or 1) == b
        and int(r.tags.get(ConditionTag.DRAFT_TOKENS, -1)) == k
    ]
    decode = _value(decode_rows, f"stand-in decode_step_ms at batch {b}")
    verify = _value(verify_rows, f"stand-in verify_compute_ms at batch {b}, {k} draft tokens")
    gaps = [w for w, v in ((f"decode at batch {b}", decode), (f"verify at batch {b}, k {k}", verify)) if v is None]
    return _Standin(decode, verify, label, f"the stand-in has no {' or '.join(gaps)}" if gaps else "")


def _newest(rows: Sequence[_Row], c: Conditions) -> int:
    return max(r.trial_id for r in rows if r.conditions == c)


def _engine_values(rows: Sequence[_Row], k: int) -> tuple[Value | None, Value | None, Value | None, Value | None]:
    """The cell's measured speedup, accept length at k, and step times off and on (the counting method)."""
    speedup = _value([r for r in rows if r.name == M.ENGINE_SPEEDUP], "engine_speedup")
    taus = [r for r in rows if r.name == M.ENGINE_ACCEPT_LENGTH and r.value >= 1]
    taus = [r for r in taus if not str(r.tags.get("derivation", "")).startswith(DERIVED_SHORTER)] or taus
    tau = _value(taus, f"engine_accept_length at {k} draft tokens")
    steps = [r for r in rows if r.name == M.ENGINE_STEP_MS and step_method(r.tags) == COUNTING]
    off = _value([r for r in steps if r.tags.get("spec") == "off"], "engine_step_ms, spec off (iteration-counter)")
    on = _value([r for r in steps if r.tags.get("spec") == "on"], "engine_step_ms, spec on (iteration-counter)")
    return speedup, tau, off, on


def _draws(value: Value | None, rng: np.random.Generator) -> np.ndarray | None:
    """The value's resamples (trials, then samples within each), or its constant when exact."""
    if value is None or value.value is None:
        return None
    if value.exact or not value.sampled:
        return np.full(RESAMPLES, float(value.value))
    return trial_resamples_many([value.trials], RESAMPLES, rng)[0]


def _figure(
    point: float,
    draws: np.ndarray | None,
    confidence: float,
    trials: Sequence[int],
    source: str,
    unstable: bool = False,
) -> Figure:
    low = high = None
    one = len(set(trials)) <= 1
    if draws is not None and np.isfinite(draws).all() and np.ptp(draws) > 0:
        lo, hi = percentile_intervals(draws[None, :], confidence)
        low, high = float(lo[0]), float(hi[0])
    interval = Interval(float(point), low, high, unstable, no_samples=low is None, within_run_only=one)
    return Figure(interval, tuple(sorted(set(trials))), source)


def _fig(value: Value, draws: np.ndarray | None, confidence: float) -> Figure:
    assert value.value is not None
    return _figure(value.value, draws, confidence, value.trial_ids, value.source, value.unstable)


def _drafters(
    cells: dict[tuple[Conditions, int, int], list[_Row]], standin: Sequence[_Row], rng: np.random.Generator
) -> dict[tuple[Conditions, int, int], tuple[float, np.ndarray, tuple[int, ...]]]:
    """Each engine cell's own n-gram drafter cost, T_on - verify(b, k) - (T_off - decode(b)), with its draws:
    what the cells at the same batch and other k borrow (never the cell itself)."""
    out = {}
    for (cond, b, k), rows in cells.items():
        _s, _tau, off, on = _engine_values(rows, k)
        if off is None or on is None or not rows:
            continue
        st = _standin_for(cond, rows[0].tags, b, k, standin)
        if st.decode is None or st.verify is None:
            continue
        d = [_draws(v, rng) for v in (on, st.verify, off, st.decode)]
        assert all(x is not None for x in d)
        point = on.value - st.verify.value - (off.value - st.decode.value)  # type: ignore[operator]
        draws = d[0] - d[1] - (d[2] - d[3])  # type: ignore[operator]
        out[(cond, b, k)] = (float(point), draws, tuple(sorted({*on.trial_ids, *st.verify.trial_ids})))
    return out


def _holds(predicted: Figure, measured: Figure) -> tuple[bool, float]:
    return predicted.interval.overlaps(measured.interval), predicted.interval.value / measured.interval.value - 1.0


def _drafter(
    cond: Conditions,
    b: int,
    k: int,
    drafters: dict[tuple[Conditions, int, int], tuple[float, np.ndarray, tuple[int, ...]]],
    confidence: float,
) -> tuple[float, np.ndarray, tuple[int, ...], str, Figure | None]:
    """The n-gram drafter's cost for a stand-in prediction: the engine's measured cost at the nearest other k of
    this batch, else counted 0; (T_draft, its draws, its trials, the note saying which, its figure)."""
    drafter_fig = None
    others = sorted(
        ((abs(kk - k), kk) for (c, bb, kk) in drafters if c == cond and bb == b and kk != k),
    )
    draft_ids: tuple[int, ...] = ()
    if others and drafters[(cond, b, others[0][1])][0] < 0:
        kk = others[0][1]
        t_draft, d_draft = 0.0, np.zeros(RESAMPLES)
        draft_note = (
            f"T_draft counted 0: measured at k {kk} it came out negative ({drafters[(cond, b, kk)][0]:.3f} ms), "
            "the stand-in's compute above the engine's step there"
        )
    elif others:
        kk = others[0][1]
        t_draft, d_draft, draft_ids = drafters[(cond, b, kk)]
        drafter_fig = _figure(
            t_draft, d_draft, confidence, draft_ids, f"T_on - verify - overhead at {kk} draft tokens, batch {b}"
        )
        draft_note = f"T_draft {t_draft:.3f} ms: the engine's n-gram drafter, measured at k {kk}"
    else:
        t_draft, d_draft = 0.0, np.zeros(RESAMPLES)
        draft_note = "T_draft counted 0: the engine measured no other k at this batch to take it from"
    return t_draft, d_draft, draft_ids, draft_note, drafter_fig


def _standin_predictions(
    cond: Conditions,
    b: int,
    k: int,
    st: _Standin,
    tau: Value,
    off: Value | None,
    engine_draws: tuple[np.ndarray | None, np.ndarray | None],
    drafters: dict[tuple[Conditions, int, int], tuple[float, np.ndarray, tuple[int, ...]]],
    rng: np.random.Generator,
    confidence: float,
    judged: Callable[..., None],
    predictions: list[Prediction],
) -> tuple[Figure | None, Figure | None]:
    """The stand-in's two predictions of one engine cell (without and with the engine's per-step overhead), judged
    by `judged` into `predictions`; (the overhead's figure, the drafter's figure). The draws follow `_cell`'s."""
    d_tau, d_off = engine_draws
    overhead_fig = None
    assert st.decode is not None and st.verify is not None and tau.value is not None
    d_dec, d_ver = _draws(st.decode, rng), _draws(st.verify, rng)
    t_draft, d_draft, draft_ids, draft_note, drafter_fig = _drafter(cond, b, k, drafters, confidence)
    judged(
        STANDIN,
        float(formula.speedup(tau.value, st.decode.value, t_draft, st.verify.value)),
        formula.speedup(d_tau, d_dec, d_draft, d_ver),
        (tau, st.decode, st.verify),
        f"tau x decode / (T_draft + verify), {st.label}",
        draft_note,
        draft_ids,
    )
    if off is None:
        predictions.append(Prediction(STANDIN_OVERHEAD, None, None, None, "the engine's spec-off step"))
    else:
        assert off.value is not None and d_off is not None and d_dec is not None
        assert st.decode.value is not None and st.verify.value is not None
        overhead = off.value - st.decode.value
        d_ovh = d_off - d_dec
        overhead_fig = _figure(
            overhead,
            d_ovh,
            confidence,
            (*off.trial_ids, *st.decode.trial_ids),
            f"engine step, spec off (trial {_ids(off.trial_ids)}) - stand-in decode at batch {b} "
            f"(trial {_ids(st.decode.trial_ids)})",
        )
        if overhead <= 0:  # the stand-in's compute alone exceeds the engine's whole step: nothing to add
            predictions.append(
                Prediction(
                    STANDIN_OVERHEAD,
                    None,
                    None,
                    None,
                    f"the stand-in's decode ({st.decode.value:.3f} ms) is not below the engine's whole spec-off "
                    f"step ({off.value:.3f} ms): no overhead can be derived (a loaded node, or a slower stand-in)",
                )
            )
        else:
            judged(
                STANDIN_OVERHEAD,
                float(formula.speedup(tau.value, st.decode.value + overhead, t_draft, st.verify.value + overhead)),
                formula.speedup(d_tau, d_dec + d_ovh, d_draft, d_ver + d_ovh),
                (tau, st.decode, st.verify, off),
                f"tau x (decode + overhead) / (T_draft + verify + overhead), overhead {overhead:.3f} ms",
                draft_note,
                draft_ids,
            )
    return overhead_fig, drafter_fig


def _cell(
    cond: Conditions,
    b: int,
    k: int,
    rows: list[_Row],
    standin_rows: Sequence[_Row],
    drafters: dict[tuple[Conditions, int, int], tuple[float, np.ndarray, tuple[int, ...]]],
    rng: np.random.Generator,
    confidence: float,
) -> CheckCell:
    speedup, tau, off, on = _engine_values(rows, k)
    assert speedup is not None
    trials = tuple(sorted(speedup.trial_ids))
    measured = _fig(speedup, _draws(speedup, rng), confidence)
    one_trial = len(trials) == 1
    d_tau, d_off, d_on = _draws(tau, rng), _draws(off, rng), _draws(on, rng)
    engine_missing = [w for w, v in (("accept length", tau), ("spec-off step", off), ("spec-on step", on)) if v is None]
    predictions: list[Prediction] = []

    def judged(
        name: str,
        point: float,
        draws: np.ndarray,
        inputs: Sequence[Value],
        source: str,
        note: str = "",
        ids: Sequence[int] = (),
    ) -> None:
        """Judge one prediction against the measured figure; unstable when any input or the measurement is."""
        trial_ids = (*ids, *(i for v in inputs for i in v.trial_ids))
        unstable = speedup.unstable or any(v.unstable for v in inputs)
        fig = _figure(point, draws, confidence, trial_ids, source, unstable)
        held, off_by = _holds(fig, measured)
        predictions.append(Prediction(name, fig, held, off_by, note=note))

    if engine_missing:
        predictions.append(Prediction(ENGINE_COUNTING, None, None, None, f"the engine's {', '.join(engine_missing)}"))
    else:
        assert tau is not None and off is not None and on is not None
        judged(
            ENGINE_COUNTING,
            float(formula.speedup(tau.value, off.value, 0.0, on.value)),
            formula.speedup(d_tau, d_off, 0.0, d_on),
            (tau, off, on),
            "tau x T_off / T_on, the engine's own figures",
        )
    st = _standin_for(cond, rows[0].tags, b, k, standin_rows)
    overhead_fig = drafter_fig = None
    if st.missing or tau is None:
        why = st.missing or "the engine's accept length"
        predictions.append(Prediction(STANDIN, None, None, None, why))
        predictions.append(Prediction(STANDIN_OVERHEAD, None, None, None, why))
    else:
        overhead_fig, drafter_fig = _standin_predictions(
            cond, b, k, st, tau, off, (d_tau, d_off), drafters, rng, confidence, judged, predictions
        )
    figures = {
        name: (_fig(v, _draws(v, rng), confidence) if v is not None else None)
        for name, v in (("tau", tau), ("off", off), ("on", on), ("dec", st.decode), ("ver", st.verify))
    }
    return CheckCell(
        b,
        k,
        cond,
        trials,
        measured,
        one_trial,
        tuple(predictions),
        figures["tau"],
        figures["off"],
        figures["on"],
        figures["dec"],
        figures["ver"],
        overhead_fig,
        drafter_fig,
        st.label or st.missing,
    )


def _ids(ids: Sequence[int]) -> str:
    return ", ".join(f"#{i}" for i in sorted(set(ids)))


# ---- documents -----------------------------------------------------------------------------------------


def _figure_doc(f: Figure | None) -> dict[str, Any] | None:
    if f is None:
        return None
    return {**f.interval.as_dict(), "trials": list(f.trials), "source": f.source}


def check_document(check: EngineCheck) -> dict[str, Any]:
    """The check as the API and `campaign answer --engine-check --json` give it."""
    return {
        "rule": check.rule,
        "confidence": check.confidence,
        "held": check.held,
        "missed": check.missed,
        "missing": list(check.missing),
        "overheads": [{"batch": b, **(_figure_doc(f) or {})} for b, f in check.overheads],
        "cells": [
            {
                "batch": c.batch,
                "draft_tokens": c.draft_tokens,
                "conditions": c.conditions.key,
                "conditions_label": c.label,
                "trials": list(c.trials),
                "one_trial": c.one_trial,
                "measured": _figure_doc(c.measured),
                "predictions": [
                    {
                        "name": p.name,
                        "figure": _figure_doc(p.figure),
                        "held": p.held,
                        "off_by": p.off_by,
                        "words": p.words,
                        "missing": p.missing,
                        "note": p.note,
                    }
                    for p in c.predictions
                ],
                "inputs": {
                    "accept_length": _figure_doc(c.tau),
                    "engine_step_off_ms": _figure_doc(c.step_off_ms),
                    "engine_step_on_ms": _figure_doc(c.step_on_ms),
                    "standin_decode_ms": _figure_doc(c.decode_ms),
                    "standin_verify_ms": _figure_doc(c.verify_ms),
                    "engine_overhead_ms": _figure_doc(c.overhead_ms),
                    "ngram_drafter_ms": _figure_doc(c.drafter_ms),
                },
                "standin": c.standin,
            }
            for c in check.cells
        ],
    }


def check_lines(check: EngineCheck) -> list[str]:
    """The check in lines, as the CLI prints it and the pages word it ("b 4, k 3: measured 1.21 [...]; ...")."""
    lines = [f"checked against the engine ({check.rule}; {check.confidence:.0%} intervals)"]
    lines += [f"missing: {m}" for m in check.missing]
    for c in check.cells:
        trial_words = "one trial: within-trial spread" if c.one_trial else f"{len(c.trials)} trials"
        lines.append(
            f"batch {c.batch}, k {c.draft_tokens} ({c.label}; {trial_words}, {_ids(c.trials)}): "
            f"measured {interval_words(c.measured.interval)}"
        )
        for p in c.predictions:
            shown = f"{interval_words(p.figure.interval)}: " if p.figure is not None else ""
            lines.append(f"  {p.name}: {shown}{p.words}" + (f" ({p.note})" if p.note else ""))
        if c.overhead_ms is not None:
            lines.append(
                f"  engine per-step overhead {interval_words(c.overhead_ms.interval, 3)} ms ({c.overhead_ms.source})"
            )
    return lines


def interval_words(i: Interval, digits: int = 3) -> str:
    if i.low is None or i.high is None or not (math.isfinite(i.low) and math.isfinite(i.high)):
        return f"{i.value:.{digits}f}"
    return f"{i.value:.{digits}f} [{i.low:.{digits}f}, {i.high:.{digits}f}]"
