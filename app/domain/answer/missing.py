"""What the grid lacks, in its words: every missing input with the conditions it is missing under and the
trial that would measure it (values.Missing). Pure.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from app.domain.answer.grid import SpeculationInputs
from app.domain.answer.sentence import _batches_text, _size_bytes
from app.domain.answer.values import Missing


def _missing(spec: SpeculationInputs, gaps: dict[str, list[str]], measurer: str | None) -> list[Missing]:
    out: list[Missing] = [Missing(what, why) for what, why in spec.set_aside]
    out += spec.missing
    if spec.n_ar is None:
        out.append(Missing("allreduces per verify step", "enter it on the campaign (2 per layer for TP)"))
    if not spec.approaches:
        out.append(
            Missing(
                "a sweep over batch sizes and draft tokens",
                "run the verify_step recipe with `batches` and `draft_tokens` lists (it also reports the plain "
                "decode step per batch) and the draft_step recipe with `batches`",
                None,
            )
        )
    worlds = {ai.key: ai.world_size for ai in spec.approaches}
    for key, why in gaps.items():
        out += _approach_gaps(key, why, worlds.get(key, 1))
    missing_k = [k for k in spec.draft_tokens if k not in spec.tau]
    if missing_k:
        out.append(
            Missing(
                f"accept length tau at {', '.join(str(k) for k in missing_k)} draft tokens",
                "run an sglang_server trial with EAGLE-3 at each k (--speculative-num-steps k "
                "--speculative-num-draft-tokens k+1, top-k 1), or enter tau per k or the per-position acceptance "
                "rates on the campaign",
                measurer,
            )
        )
    if spec.conditions is not None:
        label = spec.conditions.label
        out = [m if m.conditions else replace(m, conditions=label) for m in out]
    return out


def _approach_gaps(key: str, why: list[str], world: int) -> list[Missing]:
    """One approach's gaps (the cells' notes) as what to measure: the batches, cells and sizes grouped by input."""
    out: list[Missing] = []
    kinds: dict[str, list[str]] = defaultdict(list)
    for text in why:
        if text.startswith("no plain decode step"):
            kinds["decode"].append(text.rsplit(" ", 1)[-1])
        elif text.startswith("no draft step"):
            kinds["draft"].append(text.rsplit(" ", 1)[-1])
        elif text.startswith("no verify compute"):
            kinds["verify"].append(text.removeprefix("no verify compute at "))
        elif "outside the measured allreduce sizes" in text:
            kinds["allreduce"].append(text.split(" is outside")[0])
        elif text.startswith("no allreduce curve"):
            kinds["curve"].append(text)
    if kinds["decode"]:
        out.append(
            Missing(
                f"plain decode step at batch {_batches_text([int(b) for b in kinds['decode']])}",
                "run this approach's verify_step recipe with these batches (it reports decode_step_ms per batch)",
                key,
            )
        )
    if kinds["draft"]:
        out.append(
            Missing(
                f"draft step at batch {_batches_text([int(b) for b in kinds['draft']])}",
                f"run the draft_step recipe with these `batches` and `world_size` {world} (the verify step's TP: "
                "a draft step measured at another world size is not paired)",
                key,
            )
        )
    if kinds["verify"]:
        cells = sorted(set(kinds["verify"]))
        shown = "; ".join(cells[:6]) + (f"; and {len(cells) - 6} more" if len(cells) > 6 else "")
        out.append(
            Missing(
                f"verify compute at batch {shown}",
                "run this approach's verify_step recipe with these `batches` and `draft_tokens`",
                key,
            )
        )
    if kinds["allreduce"]:
        sizes = sorted(set(kinds["allreduce"]), key=_size_bytes)
        out.append(
            Missing(
                f"allreduce latency at {sizes[0]}" + (f" to {sizes[-1]}" if len(sizes) > 1 else ""),
                "run this approach's allreduce recipe with sizes up to these (the model does not extrapolate)",
                key,
            )
        )
    if kinds["curve"]:
        out.append(Missing("allreduce latency curve", "run this approach's allreduce recipe", key))
    return out
