"""The answer's vocabulary: the conditions a figure was measured under, one value type, one missing type.

- `Conditions`: the tags of `app.protocol.metrics.ConditionTag` a figure carries (world size, mode, context,
  dtype, device, the model geometry and stand-in) and its trial's stack (the runner's fingerprint components).
  Two figures are combined only where every condition both state agrees (`agrees`); a condition a recipe does
  not state is "not stated", never a default, except the stand-in: a figure without `standin` is the dense one.
- `Value`: one input of the model: its value, each trial's samples (the trial is the unit of replication), its
  spread, its source trial, its conditions. An entered or derived value has no trials: it is exact, and said so.
- `Missing`: what the answer lacks, under which conditions, and the trial that would measure it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.domain.fingerprint import STACK_COMPONENTS, component_value
from app.domain.statistics import Rule, TrialEstimate, trial_estimate
from app.protocol.metrics import ConditionTag

# The stack components a figure depends on (the host name and Python version do not move a GPU timing).
STACK_KEYS = tuple(c for c in STACK_COMPONENTS if c != "python")
DENSE = "dense"


@dataclass(frozen=True)
class Conditions:
    """What a figure was measured under: `tags` (ConditionTag names -> value, only those stated) and `stack`
    (component -> version, only those the trial's fingerprint names)."""

    tags: tuple[tuple[str, Any], ...] = ()
    stack: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(
        cls, tags: Mapping[str, Any], fingerprint: Mapping[str, Any] | None = None, keys: Sequence[str] = ()
    ) -> Conditions:
        """The conditions among `keys` (default: pairing and geometry) that `tags` state, and the trial's stack."""
        keys = keys or (*ConditionTag.PAIRING, *ConditionTag.GEOMETRY_KEYS)
        stated = {k: _normal(k, tags.get(k)) for k in keys if tags.get(k) is not None}
        if ConditionTag.STANDIN in keys:
            stated.setdefault(ConditionTag.STANDIN, DENSE)
        if ConditionTag.CONTEXT in keys and ConditionTag.CONTEXT not in stated and tags.get("context_len") is not None:
            stated[ConditionTag.CONTEXT] = int(tags["context_len"])  # the draft_step recipe's older name
        stack = {c: v for c in STACK_KEYS if (v := component_value(dict(fingerprint or {}), c))}
        return cls(tuple(sorted(stated.items())), tuple(sorted(stack.items())))

    @property
    def tag_map(self) -> dict[str, Any]:
        return dict(self.tags)

    def only(self, keys: Sequence[str]) -> Conditions:
        """These conditions restricted to `keys` (the stack kept)."""
        return Conditions(tuple((k, v) for k, v in self.tags if k in keys), self.stack)

    def disagreement(self, other: Conditions) -> str | None:
        """The first condition both state differently, in words ("mode graph vs eager"), else None."""
        mine, theirs = self.tag_map, other.tag_map
        for k in mine.keys() & theirs.keys():
            if mine[k] != theirs[k]:
                return f"{_label(k)} {mine[k]} vs {theirs[k]}"
        mine_s, theirs_s = dict(self.stack), dict(other.stack)
        for c in mine_s.keys() & theirs_s.keys():
            if mine_s[c] != theirs_s[c]:
                return f"{STACK_COMPONENTS[c]} {mine_s[c]} vs {theirs_s[c]} (another stack)"
        return None

    def stack_change(self, other: Conditions, components: Sequence[str]) -> str | None:
        """ "GPU A -> B, SM 12.0 -> 9.0" over `components` (in that order) where both stacks state a value and
        they differ, else None: a component either side does not state is not known to differ."""
        mine, theirs = dict(self.stack), dict(other.stack)
        changes = [
            f"{STACK_COMPONENTS[c]} {mine[c]} -> {theirs[c]}"
            for c in components
            if c in mine and c in theirs and mine[c] != theirs[c]
        ]
        return ", ".join(changes) or None

    def agrees(self, other: Conditions) -> bool:
        return self.disagreement(other) is None

    def merged(self, other: Conditions) -> Conditions:
        """Both sets of stated conditions (they agree)."""
        return Conditions(
            tuple(sorted({**self.tag_map, **other.tag_map}.items())),
            tuple(sorted({**dict(self.stack), **dict(other.stack)}.items())),
        )

    @property
    def key(self) -> str:
        """A stable text for `?conditions=` (tags only: the stack is checked when pairing, not chosen)."""
        return ",".join(f"{k}={v}" for k, v in self.tags)

    @property
    def label(self) -> str:
        """In words: "context 1,024, graph, world size 1, bf16, cuda; dense stand-in, 61 layers, hidden 7168; draft
        vocab 32,000" (the draft vocabulary where the draft step states one)."""
        t = self.tag_map
        parts = []
        if ConditionTag.CONTEXT in t:
            parts.append(f"context {int(t[ConditionTag.CONTEXT]):,}")
        if ConditionTag.MODE in t:
            parts.append(str(t[ConditionTag.MODE]))
        if ConditionTag.WORLD_SIZE in t:
            parts.append(f"world size {t[ConditionTag.WORLD_SIZE]}")
        for k in (ConditionTag.DTYPE, ConditionTag.DEVICE):
            if k in t:
                parts.append(str(t[k]))
        head = ", ".join(parts) or "conditions not stated"
        standin = standin_label(t)
        draft = f"draft vocab {int(t[ConditionTag.DRAFT_VOCAB]):,}" if ConditionTag.DRAFT_VOCAB in t else ""
        return "; ".join(p for p in (head, standin, draft) if p)

    @property
    def stack_label(self) -> str:
        return " / ".join(f"{STACK_COMPONENTS[c]} {v}" for c, v in self.stack if c in ("torch", "cuda", "nccl", "gpu"))


def standin_label(tags: Mapping[str, Any]) -> str:
    """The stand-in a figure came from, as issue 35 words it: "dense stand-in, 61 layers, hidden 7168" or
    "MoE stand-in, Kimi-K2.5 geometry, bf16 experts, 8 of 61 layers timed and scaled"; "" without geometry."""
    layers, timed = tags.get(ConditionTag.LAYERS), tags.get(ConditionTag.LAYERS_TIMED)
    if tags.get(ConditionTag.STANDIN, DENSE) == "moe":
        parts = ["MoE stand-in"]
        if tags.get(ConditionTag.GEOMETRY):
            parts.append(f"{_geometry(str(tags[ConditionTag.GEOMETRY]))} geometry")
        if tags.get(ConditionTag.EXPERTS_DTYPE):
            parts.append(f"{tags[ConditionTag.EXPERTS_DTYPE]} experts")
        if timed and layers and int(timed) < int(layers):
            parts.append(f"{timed} of {layers} layers timed and scaled")
        elif layers:
            parts.append(f"{layers} layers")
        return ", ".join(parts)
    if layers is None and tags.get(ConditionTag.HIDDEN) is None:
        return ""
    parts = ["dense stand-in"]
    if layers:
        parts.append(f"{layers} layers")
    if tags.get(ConditionTag.HIDDEN):
        parts.append(f"hidden {tags[ConditionTag.HIDDEN]}")
    return ", ".join(parts)


def _geometry(name: str) -> str:
    return {"kimi-k2.5": "Kimi-K2.5", "deepseek-v3": "DeepSeek-V3"}.get(name, name)


def _label(key: str) -> str:
    return key.replace("_", " ")


def _normal(key: str, value: Any) -> Any:
    """Tags as compared: numbers as ints where they are counts (a context of 1024.0 is 1024)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


@dataclass(frozen=True)
class Value:
    """One input: its value and where it comes from. Measured ones carry each trial's samples (`trials`), the
    trials' ids and their conditions; `value` is then the trial estimate (the mean of the trials' medians). An
    entered, derived or what-if value has no trials: exact."""

    value: float | None
    source: str = ""  # "entered on the campaign", "trial #12 (output_throughput_tok_s)", "what-if"
    trial_id: int | None = None  # the newest trial it comes from
    trials: tuple[tuple[float, ...], ...] = ()  # each trial's samples (a value without samples: one sample)
    conditions: Conditions | None = None
    trial_ids: tuple[int, ...] = ()
    cv: float | None = field(default=None, compare=False)  # the spread: run-to-run CV, else within-run CV

    @functools.cached_property
    def exact(self) -> bool:
        """Entered or derived: no trial measured it, so it carries no interval."""
        return not self.trials

    @functools.cached_property
    def sampled(self) -> bool:
        """Something to resample: two or more trials, or one trial with two or more samples."""
        return len(self.trials) >= 2 or any(len(t) >= 2 for t in self.trials)

    @property
    def samples(self) -> tuple[float, ...]:
        return tuple(x for t in self.trials for x in t)

    @functools.cached_property
    def one_trial(self) -> bool:
        """Measured by one trial only: its spread is the within-run noise, not the run-to-run one."""
        return len(self.trials) == 1

    @functools.cached_property
    def unstable(self) -> bool:
        return self.cv is not None and self.cv > Rule.unstable_cv


Input = Value  # the batch-1 inputs' name for it (ModelInputs): the same type


def measured(value: float, samples: Sequence[float] | None, source: str, trial_id: int | None = None) -> Value:
    """A figure from one trial's metric row: with samples, its value is their median (the trial estimate)."""
    kept = tuple(float(x) for x in samples or () if math.isfinite(x))
    return of_trials([kept or (float(value),)], source, (trial_id,) if trial_id is not None else ())


def of_trials(
    trials: Sequence[Sequence[float]],
    source: str,
    trial_ids: Sequence[int] = (),
    conditions: Conditions | None = None,
    estimate: TrialEstimate | None = None,
) -> Value:
    """A figure measured by `trials` (each its samples), valued as the statistics home estimates a side
    (`estimate`: that estimate, computed already by `trial_estimates_many`)."""
    kept = tuple(tuple(t) for t in trials if len(t))
    estimate = estimate or trial_estimate(kept)
    assert estimate is not None, "a measured value needs a sample"
    cv = estimate.between_cv if estimate.between_cv is not None else estimate.within_cv
    ids = tuple(trial_ids)
    return Value(estimate.value, source, max(ids) if ids else None, kept, conditions, ids, cv)


def exact(value: float, source: str, trial_id: int | None = None) -> Value:
    return Value(float(value), source, trial_id)


@dataclass(frozen=True)
class Missing:
    """An input the answer needs and does not have: what it is, under which conditions (None: any), what would
    measure it, and the approach whose trial would (None: enter it on the campaign)."""

    what: str
    how: str
    approach: str | None = None
    conditions: str | None = None
