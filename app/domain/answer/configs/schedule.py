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
class BatchDeviation:
    """At one measured batch: the predicted speedup at the answer's choice and at the config's (1.0: off)."""

    batch: int
    answer_speedup: float | None
    config_speedup: float | None

    @property
    def loss(self) -> float | None:
        """The config's predicted speedup against the answer's, as a fraction lost (negative: gained)."""
        if self.answer_speedup is None or self.config_speedup is None or not self.answer_speedup:
            return None
        return 1.0 - self.config_speedup / self.answer_speedup


@dataclass(frozen=True)
class Deviation:
    """A batch range where the written config does not do what the answer says: the answer's k and the config's
    (0: off), and the predicted cost at each measured batch inside it, from the answer's own cells."""

    start: int
    end: int
    answer_k: int
    config_k: int
    batches: tuple[BatchDeviation, ...]

    @property
    def text(self) -> str:
        """In words: "batches 3-4: the answer says off, the config drafts 1 (batch 4: 0.99x where off is 1.00x,
        -1.0%)"."""
        where = f"batch {self.start}" if self.start == self.end else f"batches {self.start}-{self.end}"
        costs = "; ".join(_cost_words(b, self.answer_k, self.config_k) for b in self.batches) or "no measured batch"
        return (
            f"{where}: the answer says {_k_words(self.answer_k)}, the config {_k_words(self.config_k, True)} ({costs})"
        )


def _k_words(k: int, config: bool = False) -> str:
    if k == 0:
        return "turns speculation off" if config else "off"
    return f"drafts {k}" if config else f"k = {k}"


def _cost_words(b: BatchDeviation, answer_k: int, config_k: int) -> str:
    def shown(s: float | None, k: int) -> str:
        return "not known" if s is None else f"{s:.2f}x" + (" (off)" if k == 0 else f" at k = {k}")

    loss = b.loss
    tail = "" if loss is None else f", {-loss:+.1%} predicted"
    return f"batch {b.batch}: {shown(b.config_speedup, config_k)} where the answer predicts {shown(b.answer_speedup, answer_k)}{tail}"


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
    rules: str = ""  # the engine release whose rules the writer follows ("TensorRT-LLM 1.4.0rc4")
    deviations: tuple[Deviation, ...] = ()  # where the written config does not do what the answer says

    @property
    def expressible(self) -> bool:
        """The config does what the answer says at every batch (no deviation)."""
        return not self.deviations

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


def speedup_at(chosen: ApproachAnswer, batch: int, k: int) -> float | None:
    """The answer's predicted speedup at (batch, k): 1.0 with speculation off (k = 0), None where not known."""
    if k == 0:
        return 1.0
    cell = chosen.cell(batch, k)
    return cell.speedup.value if cell is not None and cell.speedup is not None else None


def written_k(written: list[tuple[int, int, int]], batch: int) -> int:
    """The k a written schedule of inclusive (start, end, k) ranges gives `batch` (0 outside them)."""
    return next((k for start, end, k in written if start <= batch <= end), 0)


def deviations(schedule: Schedule, written: list[tuple[int, int, int]]) -> tuple[Deviation, ...]:
    """Every range of the answer's schedule (split where the written one changes) where the written k differs
    from the answer's, with the predicted speedup of both at each measured batch inside it."""
    chosen = schedule.approach
    edges = sorted({r.start for r in schedule.ranges} | {s for s, _e, _k in written if s <= LARGEST_BATCH})
    out: list[Deviation] = []
    for i, start in enumerate(edges):
        end = edges[i + 1] - 1 if i + 1 < len(edges) else LARGEST_BATCH
        answer_k = next(r.k for r in schedule.ranges if r.start <= start <= r.end)
        config_k = written_k(written, start)
        if answer_k == config_k:
            continue
        measured = [b for b in sorted(chosen.best_speedup) if start <= b <= end]
        costs = tuple(
            BatchDeviation(b, speedup_at(chosen, b, answer_k), speedup_at(chosen, b, config_k)) for b in measured
        )
        last = out[-1] if out else None
        if last is not None and last.end == start - 1 and (last.answer_k, last.config_k) == (answer_k, config_k):
            out[-1] = Deviation(last.start, end, answer_k, config_k, last.batches + costs)
        else:
            out.append(Deviation(start, end, answer_k, config_k, costs))
    return tuple(out)


@dataclass
class ConfigBuilder:
    """Collects a writer's settings, argv and notes in order."""

    argv: list[str] = field(default_factory=list)
    settings: list[Setting] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, option: str, value: Any, source: str, *, argv: list[str] | None = None) -> None:
        self.settings.append(Setting(option, value, source))
        self.argv += argv if argv is not None else [option, str(value)]
