"""Stack fingerprints: which components a verdict is bound to, and when a runner's stack differs.

A runner reports a fingerprint dict (runners/fingerprint.py):
    {"hostname", "cpu_count", "python", "gpu_count", "gpus": [{"name", "sm", "memory_mib"}],
     "sm": "12.0", "driver", "cuda", "torch", "nccl", "sglang", "flashinfer"}   (any may be None)
A verdict records the fingerprint it was reached on and `bound_to` = {"components": [...]}:
the components whose version made the result (`KeyError: 12` is bound to torch and SM). When
a runner's value of any bound component differs, the verdict deserves a re-test on it.
Pure functions, no I/O.
"""

from __future__ import annotations

from typing import Any

# The components a verdict can be bound to, in display order, with their human names.
STACK_COMPONENTS: dict[str, str] = {
    "gpu": "GPU",
    "sm": "SM",
    "driver": "driver",
    "cuda": "CUDA",
    "torch": "torch",
    "nccl": "NCCL",
    "sglang": "sglang",
    "flashinfer": "FlashInfer",
    "python": "Python",
}


def component_value(fp: dict[str, Any] | None, component: str) -> str | None:
    """The fingerprint's value for one component, as a string (None when unknown).

    "gpu" is the GPU model (the first GPU's name); "sm" falls back to the first GPU's SM.
    """
    if component not in STACK_COMPONENTS:
        raise ValueError(f"unknown stack component {component!r}; expected one of {', '.join(STACK_COMPONENTS)}")
    if not fp:
        return None
    gpus = fp.get("gpus") or []
    first = gpus[0] if gpus and isinstance(gpus[0], dict) else {}
    if component == "gpu":
        value = first.get("name")
    elif component == "sm":
        value = fp.get("sm") or first.get("sm")
    else:
        value = fp.get(component)
    if value is None or value == "":
        return None
    return str(value)


def bound_components(bound_to: dict[str, Any] | None) -> list[str]:
    """The known components listed in bound_to (unknown names are ignored; None -> [])."""
    if not bound_to:
        return []
    components = bound_to.get("components") or []
    return [c for c in components if c in STACK_COMPONENTS]


def _describe(component: str, value: str | None) -> str:
    name = STACK_COMPONENTS[component]
    return f"{name} {value if value is not None else 'unknown'}"


def describe_binding(bound_to: dict[str, Any] | None, fp: dict[str, Any] | None) -> str | None:
    """'torch 2.10.0+cu128 on SM 12.0': the stack a bound verdict holds for. None when not bound."""
    components = bound_components(bound_to)
    if not components:
        return None
    software = [c for c in components if c not in ("sm", "gpu")]
    hardware = [c for c in components if c in ("sm", "gpu")]
    parts = ", ".join(_describe(c, component_value(fp, c)) for c in software)
    where = " ".join(_describe(c, component_value(fp, c)) for c in hardware)
    if parts and where:
        return f"{parts} on {where}"
    return parts or where


def stack_changes(
    verdict_fp: dict[str, Any] | None, runner_fp: dict[str, Any] | None, components: list[str] | None = None
) -> list[tuple[str, str | None, str | None]]:
    """(component, verdict value, runner value) for each component whose value differs."""
    names = components if components is not None else list(STACK_COMPONENTS)
    changes = []
    for component in names:
        old, new = component_value(verdict_fp, component), component_value(runner_fp, component)
        if old != new:
            changes.append((component, old, new))
    return changes


def stack_difference(
    reference: dict[str, Any] | None, other: dict[str, Any] | None, components: list[str], known_only: bool = False
) -> str | None:
    """'torch 2.10.0 -> 2.11.0, NCCL 2.27 -> 2.28' over `components`, or None when those are equal. With
    `known_only`, a component either side does not report is not a difference (nothing is known to differ)."""
    changes = [
        (c, old, new)
        for c, old, new in stack_changes(reference, other, components)
        if not known_only or (old is not None and new is not None)
    ]
    if not changes:
        return None
    return ", ".join(f"{STACK_COMPONENTS[c]} {old or 'unknown'} -> {new or 'unknown'}" for c, old, new in changes)


def retest_reason(
    bound_to: dict[str, Any] | None, verdict_fp: dict[str, Any] | None, runner_fp: dict[str, Any] | None
) -> str | None:
    """'re-test: torch 2.10.0 -> 2.11.0' when a component the verdict is bound to differs on the runner.

    None when the verdict is not bound, or every bound component is the same. A runner that
    does not report a bound component (None) is no reason to re-test: nothing is known to have changed.
    """
    components = bound_components(bound_to)
    if not components:
        return None
    changes = [(c, old, new) for c, old, new in stack_changes(verdict_fp, runner_fp, components) if new is not None]
    if not changes:
        return None
    return "re-test: " + ", ".join(
        f"{STACK_COMPONENTS[c]} {old if old is not None else 'unknown'} -> {new}" for c, old, new in changes
    )
