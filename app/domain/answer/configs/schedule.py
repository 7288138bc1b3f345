"""What every engine writer shares: the config's shape, the per-batch draft length read from the answer, the
measurement each figure comes from, and the batch range a person serves.

The schedule: each measured batch b up to the break-even batch B* ends a range (previous measured batch + 1
to b) that uses b's best k, the larger batch's k being the cautious one for the unmeasured batches below it
(speedup falls with batch). Above B* speculation is off (k = 0): where a larger batch was measured not to
pay the note says so; where nothing above B* was measured it says "not measured" and never more.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from app.domain.answer.grid import ApproachAnswer, Cell, SpeculationAnswer
from app.domain.errors import Conflict, Invalid

LARGEST_BATCH = 65_536  # the board's largest batch (schemas.BatchGrid): the off range ends here


@dataclass(frozen=True)
class Setting:
    """One launch setting: the option, its value, and the measurement it comes from."""

    option: str
    value: Any
    source: str


@dataclass(frozen=True)
class ConfigFile:
    """A file the launch line names (its Download on the Deploy panel)."""

    name: str
    media_type: str
    content: str


@dataclass(frozen=True)
class BatchCost:
    """What one k costs at a served batch: its speedup there against that batch's best."""

    batch: int
    speedup: float | None  # at the chosen k (None: no speedup known at this k)
    best_k: int
    best_speedup: float


@dataclass(frozen=True)
class StaticChoice:
    """One k for every batch of the served range (an engine without per-batch speculation), with its cost."""

    serve: ServeRange
    k: int
    argv: tuple[str, ...]
    shell: str
    costs: tuple[BatchCost, ...]
    unmeasured: tuple[int, int] | None  # the part of the served range above the measured batches
    rule: str


MODEL_PLACEHOLDER = "<target-model-path>"  # what the launch line says where nothing names the path
DRAFT_PLACEHOLDER = "<eagle3-draft-path>"
HEREDOC_END = "CAMPAIGN_BOARD_EOF"


@dataclass(frozen=True)
class PathChoice:
    """A path for the launch line and where it came from ("" and the placeholder when nothing names it)."""

    value: str
    source: str

    @property
    def placeholder(self) -> bool:
        return self.value in (MODEL_PLACEHOLDER, DRAFT_PLACEHOLDER)


@dataclass(frozen=True)
class LaunchCommand:
    """The engine's whole server command: argv (one element per argument), the files to write first, and where
    the model and draft paths come from."""

    argv: tuple[str, ...]
    files: tuple[ConfigFile, ...]
    model: PathChoice
    draft: PathChoice
    tensor_parallel: int

    @property
    def command(self) -> str:
        """argv quoted for a POSIX shell (`shlex.split(command) == argv`)."""
        return shlex.join(self.argv)

    @property
    def shell(self) -> str:
        """What to paste: each file written by a quoted here-document (nothing in it expands), then the command."""
        parts = [
            f"cat > {shlex.quote(f.name)} <<'{HEREDOC_END}'\n{f.content.rstrip(chr(10))}\n{HEREDOC_END}"
            for f in self.files
        ]
        return "\n".join([*parts, self.command]) + "\n"

    @property
    def placeholders(self) -> tuple[str, ...]:
        return tuple(p.value for p in (self.model, self.draft) if p.placeholder)


@dataclass(frozen=True)
class EngineConfig:
    engine: str
    approach: str | None
    argv: tuple[str, ...]  # what to add to the launch line, one element per argument
    env: dict[str, str]
    settings: tuple[Setting, ...]
    notes: tuple[str, ...]
    files: tuple[ConfigFile, ...] = ()
    static: StaticChoice | None = None
    proposed_trials: tuple[dict[str, Any], ...] = ()  # recipes that would measure what this config cannot cite
    launch: LaunchCommand | None = None  # the whole server command around argv (configs/launch.py)

    @property
    def shell(self) -> str:
        """The launch additions quoted for a POSIX shell: pasted, each argument stays one argument."""
        return shlex.join(self.argv)

    @property
    def env_shell(self) -> str:
        return " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())


@dataclass(frozen=True)
class ServeRange:
    """The batch sizes a person serves (inclusive)."""

    low: int
    high: int

    def __str__(self) -> str:
        return f"{self.low}-{self.high}"


DEFAULT_SERVE = ServeRange(1, 32)
# "1-32" or "8"; either end 1-99999 (a served range above the measured batches is said to be unmeasured).
SERVE_PATTERN = r"^\s*[1-9][0-9]{0,4}\s*(-\s*[1-9][0-9]{0,4}\s*)?$"
_RANGE = re.compile(r"^\s*([1-9][0-9]{0,4})\s*(?:-\s*([1-9][0-9]{0,4})\s*)?$")


def parse_serve_range(text: str | None) -> ServeRange:
    """ "1-32" (or "8": one batch; "32-1" reads as 1-32) -> ServeRange; blank -> the default; else Invalid."""
    if text is None or not text.strip():
        return DEFAULT_SERVE
    found = _RANGE.match(text)
    if not found:
        raise Invalid(
            f"serve_batches must be a batch range such as 1-32 (batches 1 to 99999), not {text[:40]!r}",
            field="serve_batches",
        )
    low, high = sorted((int(found.group(1)), int(found.group(2) or found.group(1))))
    return ServeRange(low, high)


@dataclass(frozen=True)
class DeployTarget:
    """What the node the approach was measured on is: its GPUs' SM (e.g. "9.0"; None: not reported)."""

    sm: str | None = None

    @property
    def sm_major(self) -> int | None:
        head = (self.sm or "").split(".")[0]
        return int(head) if head.isdigit() else None


@dataclass(frozen=True)
class BatchRange:
    """Batches start..end (inclusive) speculate with k draft tokens (0: off), from `source`."""

    start: int
    end: int
    k: int
    source: str


@dataclass(frozen=True)
class Schedule:
    approach: ApproachAnswer
    ranges: tuple[BatchRange, ...]  # from 1, sorted, contiguous; the last is the off range above B*
    break_even_batch: int
    off_reason: str

    @property
    def speculating(self) -> tuple[BatchRange, ...]:
        return self.ranges[:-1]

    @property
    def largest_k(self) -> int:
        return max(r.k for r in self.ranges)


def decision(answer: SpeculationAnswer) -> ApproachAnswer:
    """The approach to deploy, or Conflict saying what is missing before there is one."""
    chosen = answer.chosen
    if chosen is None:
        raise Conflict("no approach is measured over batch sizes yet: nothing to deploy", field="engine")
    if not chosen.best_speedup:
        raise Conflict(
            f"the accept length per draft length is not known, so no speedup of {chosen.title} is: "
            "enter it or measure it (GET /api/campaigns/{slug}/answer lists what is missing)",
            field="engine",
        )
    if chosen.break_even_batch is None:
        raise Conflict(
            f"speculation does not pay at any measured batch with {chosen.title}: deploy it off", field="engine"
        )
    return chosen


def measurement(answer: SpeculationAnswer, chosen: ApproachAnswer, cell: Cell) -> str:
    """The measurement a cell's figure comes from: its speedup, the trials of the inputs it reads (`Cell.inputs`:
    each figure's `trial_ids`) and the conditions they were measured under."""
    figures = answer.inputs_of(cell)
    trials = sorted({t for f in figures for t in f.trial_ids})
    conditions = list(dict.fromkeys(f.conditions for f in figures if f.trial_ids and f.conditions))
    s = cell.speedup
    figure = ""
    if s is not None:
        figure = f"speedup {s.value:.2f}" + (f" [{s.low:.2f}, {s.high:.2f}]" if s.low is not None else " (no samples)")
    where = f"trials {', '.join(f'#{t}' for t in trials)}" if trials else "entered figures"
    measured_under = f"measured under {' and '.join(conditions)}" if conditions else f"world size {chosen.world_size}"
    tail = f"{measured_under}; {cell.note}" if cell.note else measured_under
    return f"batch {cell.batch}, k = {cell.draft_tokens}: {figure} ({where}; {tail})"


def per_batch_schedule(answer: SpeculationAnswer) -> Schedule:
    """The chosen approach's draft length per batch range (see the module docstring)."""
    chosen = decision(answer)
    b_star = chosen.break_even_batch
    assert b_star is not None  # decision() refuses an approach that never pays
    ranges: list[BatchRange] = []
    start = 1
    for b in sorted(chosen.best_draft_tokens):
        if b > b_star:
            break
        k = chosen.best_draft_tokens[b]
        best = max(
            (c for c in chosen.cells if c.batch == b and c.speedup is not None),
            key=lambda c: c.speedup.value,  # type: ignore[union-attr]
        )
        why = measurement(answer, chosen, best)
        if k == 0:
            shown = "no k is shown to pay" if chosen.decision.get(b) == "unclear" else "no k pays"
            why = f"{shown} at batch {b} (its interval decides): best {why}"
        if ranges and ranges[-1].k == k:
            last = ranges[-1]
            ranges[-1] = BatchRange(last.start, b, k, f"{last.source}; {why}")
        else:
            ranges.append(BatchRange(start, b, k, why))
        start = b + 1
    losing = chosen.first_losing_batch
    if losing is not None:
        cell = max(
            (c for c in chosen.cells if c.batch == losing and c.speedup is not None),
            key=lambda c: c.speedup.value,  # type: ignore[union-attr]
        )
        off = f"speculation does not pay at batch {losing} ({measurement(answer, chosen, cell)})"
        if losing > b_star + 1:
            off += f"; batches {b_star + 1}-{losing - 1} are not measured"
    else:
        off = f"above batch {b_star} not measured: off there until larger batches are measured"
    ranges.append(BatchRange(b_star + 1, LARGEST_BATCH, 0, off))
    return Schedule(chosen, tuple(ranges), b_star, off)


def static_choice(schedule: Schedule, serve: ServeRange, argv_for: Any) -> StaticChoice | None:
    """One k for the served range: the k with the highest mean speedup over the measured batches inside it
    (ties: the smaller k), with its speedup at each of them against that batch's best. None when no measured
    batch falls inside the range. `argv_for(k)` gives the engine's flags for k."""
    chosen = schedule.approach
    served = [b for b in sorted(chosen.best_speedup) if serve.low <= b <= serve.high]
    if not served:
        return None
    by_cell = {(c.batch, c.draft_tokens): c.speedup.value for c in chosen.cells if c.speedup is not None}
    ks = sorted({k for (_b, k) in by_cell})
    usable = [k for k in ks if all((b, k) in by_cell for b in served)]
    if not usable:
        return None
    k = max(usable, key=lambda k: (sum(by_cell[(b, k)] for b in served) / len(served), -k))
    costs = tuple(
        BatchCost(b, by_cell.get((b, k)), chosen.best_draft_tokens[b], chosen.best_speedup[b].value) for b in served
    )
    top = max(chosen.best_speedup)
    unmeasured = (max(serve.low, top + 1), serve.high) if serve.high > top else None
    argv = tuple(argv_for(k))
    rule = (
        f"the k with the highest mean speedup over the measured batches {served[0]}-{served[-1]} of the served "
        f"range {serve}"
    )
    return StaticChoice(serve, k, argv, shlex.join(argv), costs, unmeasured, rule)


@dataclass
class ConfigBuilder:
    """Collects a writer's settings, argv and notes in order."""

    argv: list[str] = field(default_factory=list)
    settings: list[Setting] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, option: str, value: Any, source: str, *, argv: list[str] | None = None) -> None:
        self.settings.append(Setting(option, value, source))
        self.argv += argv if argv is not None else [option, str(value)]
