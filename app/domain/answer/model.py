"""The break-even math of the speculation model (shared/domain.md): no database, no inputs' sources.

Symbols, per speculative cycle (all times in ms unless the name says us):
    T_base    plain decode step at batch 1, ms/token = 1000 / baseline tok/s
    tau       mean accepted length incl. the bonus token (SGLang "accept len")
    T_draft   = draft steps x t_draft_step
    T_verify  = T_verify_compute + N_ar x t_ar
Speedup S = tau x T_base / (T_draft + T_verify); profitable iff S > 1, i.e. the verify
communication N_ar x t_ar is below the *speculation savings* tau x T_base - T_draft - T_verify_compute.
Break-even allreduce latency t_ar* = savings / N_ar; break-even acceptance
tau*(t_ar) = (T_draft + T_verify_compute + N_ar x t_ar) / T_base.

The break-even curve tau*(t_ar) needs only T_base and N_ar: while the draft cost or the verify compute
is unknown it is drawn with them at zero, a *lower bound* (labelled so), and it tightens as they become
known. Accept length is only needed to say whether speculation pays now.

One definition: the functions below are the formula, and every figure of it is computed by them: the answer's
grid (grid.py, on numpy arrays of every cell and bootstrap replicate), its cells' savings and break-even latency,
and the scalar `CycleCosts` / `BreakEvenCurve` the batch-1 report and its chart draw (on floats). Each works on
floats and numpy arrays alike (`Num`), in the one operation order, so a figure is the same number whichever
reader computes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BYTES_PER_ELEMENT = 2  # bf16 activations

Num = Any  # a float, or a numpy array of them (the grid's cells and replicates): the functions below take both


def comm_ms(n_ar: Num, t_ar_us: Num) -> Num:
    """The verify step's communication N_ar x t_ar, in ms (t_ar in us)."""
    return t_ar_us * (n_ar / 1000.0)


def verify_ms(verify_compute_ms: Num, comm: Num) -> Num:
    """T_verify = T_verify_compute + N_ar x t_ar."""
    return verify_compute_ms + comm


def break_even_tau(t_base: Num, draft_ms: Num, verify: Num) -> Num:
    """tau* = (T_draft + T_verify) / T_base: the accept length speculation must exceed."""
    return (draft_ms + verify) / t_base


def speedup(tau: Num, t_base: Num, draft_ms: Num, verify: Num) -> Num:
    """S = tau x T_base / (T_draft + T_verify)."""
    return tau * t_base / (draft_ms + verify)


def savings_ms(tau: Num, t_base: Num, draft_ms: Num, verify_compute_ms: Num) -> Num:
    """tau x T_base - T_draft - T_verify_compute: what the verify communication must stay under."""
    return tau * t_base - draft_ms - verify_compute_ms


def break_even_t_ar_us(savings: Num, n_ar: Num) -> Num:
    """t_ar* = savings / N_ar, in us."""
    return savings / n_ar * 1000.0


def profitable(comm: Num, savings: Num) -> Num:
    """S > 1, i.e. the communication below the savings."""
    return comm < savings


def t_base_ms(baseline_tok_s: float) -> float:
    """Plain decode ms/token at batch 1."""
    return 1000.0 / baseline_tok_s


def leviathan_expected_tokens(alpha: float, gamma: int) -> float:
    """Expected tokens per cycle, (1 - alpha^(gamma+1)) / (1 - alpha) (Leviathan et al. 2023)."""
    if alpha == 1.0:
        return gamma + 1.0
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def leviathan_speedup(alpha: float, gamma: int, c: float) -> float:
    """Walltime improvement (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)); c = draft/target cost ratio."""
    return leviathan_expected_tokens(alpha, gamma) / (gamma * c + 1)


@dataclass(frozen=True)
class CycleCosts:
    """One speculative cycle's known costs; the allreduce latency t_ar is the open variable."""

    t_base_ms: float
    tau: float
    draft_ms: float
    verify_compute_ms: float
    n_ar: int

    @property
    def savings_ms(self) -> float:
        """tau x T_base - T_draft - T_verify_compute: what the verify communication must stay under."""
        return float(savings_ms(self.tau, self.t_base_ms, self.draft_ms, self.verify_compute_ms))

    @property
    def break_even_t_ar_us(self) -> float | None:
        """t_ar* = savings / N_ar (None without allreduces: then communication cannot decide it)."""
        return float(break_even_t_ar_us(self.savings_ms, self.n_ar)) if self.n_ar > 0 else None

    def comm_ms(self, t_ar_us: float) -> float:
        return float(comm_ms(self.n_ar, t_ar_us))

    def verify_ms(self, t_ar_us: float) -> float:
        return float(verify_ms(self.verify_compute_ms, self.comm_ms(t_ar_us)))

    def speedup(self, t_ar_us: float) -> float:
        """S = tau x T_base / (T_draft + T_verify)."""
        return float(speedup(self.tau, self.t_base_ms, self.draft_ms, self.verify_ms(t_ar_us)))

    def break_even_tau(self, t_ar_us: float) -> float:
        """tau* = (T_draft + T_verify) / T_base."""
        return float(break_even_tau(self.t_base_ms, self.draft_ms, self.verify_ms(t_ar_us)))

    def profitable(self, t_ar_us: float) -> bool:
        return bool(profitable(self.comm_ms(t_ar_us), self.savings_ms))


@dataclass(frozen=True)
class BreakEvenCurve:
    """tau*(t_ar) = (T_draft + T_verify_compute + N_ar x t_ar) / T_base: the accept length speculation must
    exceed. An unknown draft cost or verify compute counts as zero, which makes the curve a lower bound."""

    t_base_ms: float
    n_ar: int
    draft_ms: float | None
    verify_compute_ms: float | None

    @property
    def lower_bound(self) -> bool:
        return self.draft_ms is None or self.verify_compute_ms is None

    @property
    def unknown(self) -> tuple[str, ...]:
        """The terms counted as zero, in words."""
        return tuple(
            what
            for what, value in (("draft cost", self.draft_ms), ("verify compute", self.verify_compute_ms))
            if value is None
        )

    @property
    def fixed_ms(self) -> float:
        """The known non-communication part of a cycle: T_draft + T_verify_compute."""
        return (self.draft_ms or 0.0) + (self.verify_compute_ms or 0.0)

    def tau_star(self, t_ar_us: float) -> float:
        """The formula's tau* at `t_ar_us` (the unknown terms at 0), as the grid computes a cell's."""
        verify = verify_ms(self.verify_compute_ms or 0.0, comm_ms(self.n_ar, t_ar_us))
        return float(break_even_tau(self.t_base_ms, self.draft_ms or 0.0, verify))

    def speedup(self, tau: float, t_ar_us: float) -> float:
        """S at `t_ar_us` with accept length `tau` (meaningful only while the curve is not a lower bound)."""
        verify = verify_ms(self.verify_compute_ms or 0.0, comm_ms(self.n_ar, t_ar_us))
        return float(speedup(tau, self.t_base_ms, self.draft_ms or 0.0, verify))

    @property
    def contains(self) -> str:
        """What tau* counts, in words: the page says "tau* (communication only)" rather than a bare tau*."""
        if self.draft_ms is None and self.verify_compute_ms is None:
            return "communication only"
        if self.verify_compute_ms is None:
            return "communication and draft"
        if self.draft_ms is None:
            return "communication and verify compute"
        return "the full break-even"

    @property
    def label(self) -> str:
        if not self.lower_bound:
            return "break-even accept length τ*"
        return f"lower bound on τ* ({' and '.join(self.unknown)} not known yet, counted as 0)"
