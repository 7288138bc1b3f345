"""The failure signatures are a table (app/domain/signatures.SIGNATURE_TABLE) read by one matcher: every
entry, and every pattern of an entry, is reached by a fixture log — it is the first that matches, so no
entry sits unreachable behind an earlier one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.domain.fingerprint import STACK_COMPONENTS
from app.domain.signatures import SIGNATURE_TABLE, SIGNATURES, _find, _Trial, classify
from app.protocol.metrics import parse_metric_line
from app.protocol.preflight import PROPOSABLE_STATUSES

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
PREFLIGHT = (
    "    launch_server.py: error: unrecognized arguments: --enable-torch-symm-mem\n"
    "preflight: sglang_flags: FAILED in 3.0s: sglang 0.5.9 does not know --enable-torch-symm-mem\n"
    '@@campaign-preflight {"bound_to": ["sglang"], "cause": "flag not supported", "check": "sglang_flags", '
    '"summary": "s", "verdict": "retest"}\n'
)
SLOW = (LOGS / "bench_custom_ar_pcie.log").read_text()

# (log text, classify's keyword arguments): one or more per entry of the table.
CASES: list[tuple[str, dict[str, Any]]] = [
    (PREFLIGHT, {"exit_code": 4}),
    *[
        ((LOGS / name).read_text(), {"exit_code": 1})
        for name in (
            "vllm_unknown_flag.log",
            "unknown_flag_sglang059.log",
            "vllm_model_path_missing.log",
            "mscclpp_not_installed.log",
            "symm_mem_keyerror_sm120.log",
            "flashinfer_jit_sm120.log",
            "cuda_oom_nccl_channels.log",
            "vllm_cpu_kv_cache_oom.log",
            "illegal_memory_access.log",
            "segfault_core_dumped.log",
            "cuda_graph_capture_nccl_tree.log",
            "port_in_use.log",
            "nccl_internal_error.log",
            "readiness_timeout.log",
        )
    ],
    ("RuntimeError: no kernel image is available for sm_120a\n", {"exit_code": 1}),  # jit, its second pattern
    ((LOGS / "readiness_stall_capturing.log").read_text(), {"exit_code": 3}),
    ((LOGS / "sglang_raw_stall_capturing.log").read_text(), {"timed_out": True}),
    ((LOGS / "killed_oom_killer.log").read_text(), {"signal": 9}),
    (
        SLOW,
        {
            "exit_code": 0,
            "metrics": [m for m in map(parse_metric_line, SLOW.splitlines()) if m],
            "baseline": {"output_throughput_tok_s": 82.0},
        },
    ),
]


def _trial(text: str, kwargs: dict[str, Any]) -> _Trial:
    return _Trial(
        text.splitlines(),
        kwargs.get("exit_code"),
        kwargs.get("signal"),
        list(kwargs.get("metrics") or []),
        kwargs.get("baseline"),
        kwargs.get("timed_out", False),
    )


def _reached_by(text: str, kwargs: dict[str, Any]) -> tuple[str, int] | None:
    """(the entry that classify's answer comes from, the index of its pattern that matched, -1 for `read`)."""
    found = classify(text, **kwargs)
    if found is None:
        return None
    trial = _trial(text, kwargs)
    entry = next(e for e in SIGNATURE_TABLE if e.match(trial) is not None)
    assert entry.match(trial) == found  # the first entry that matches is classify's answer
    if entry.read is not None:
        return entry.name, -1
    return entry.name, next(i for i, p in enumerate(entry.patterns) if _find(trial.lines, p.regex))


def test_every_entry_and_every_pattern_is_reached_by_a_fixture_log():
    reached = {_reached_by(text, kwargs) for text, kwargs in CASES}
    wanted = {
        (entry.name, index)
        for entry in SIGNATURE_TABLE
        for index in ([-1] if entry.read is not None else range(len(entry.patterns)))
    }
    assert wanted - reached == set()


@pytest.mark.parametrize("entry", SIGNATURE_TABLE, ids=lambda e: e.name)
def test_each_entry_is_data_or_reads_the_trial_never_both(entry):
    assert (entry.read is None) == bool(entry.patterns)
    assert entry.verdict in (*PROPOSABLE_STATUSES, None)
    assert entry.verdict is not None or entry.read is not None  # a pattern entry proposes its own verdict
    for pattern in entry.patterns:
        assert set(pattern.bound_to) <= set(STACK_COMPONENTS), pattern.bound_to


def test_classify_walks_the_table_in_its_order():
    assert [name for name, _ in SIGNATURES] == [entry.name for entry in SIGNATURE_TABLE]
