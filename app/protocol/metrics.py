"""The structured metric line recipes print, and its parser.

One line per result: the prefix, then a JSON object with name, value, unit and tags.
Standard library only: recipes run on GPU nodes that have torch but not the server's packages.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from typing import Any, TextIO

METRIC_PREFIX = "@@campaign-metric "
# A line naming the trial's phase (launching, waiting for ready, benchmarking, tearing down, ...).
PHASE_PREFIX = "@@campaign-phase "


class MetricName:
    """The one place metric names are spelled: recipes emit these, every reader imports them.

    Collective and model recipes tag every metric with `device` ("cuda" or "cpu") and `scaled`
    (true when the geometry is smaller than the full model's): readers treat device=cpu or
    scaled=true as a CPU floor, never as a model input. A multi-node world also emits allreduce
    figures within each node and among the node leaders under the same names, told apart by the tag
    `scope` (world | node | cross-node; absent = world): readers of model inputs take the world's.
    """

    # allreduce recipe
    ALLREDUCE_LATENCY_US = "allreduce_latency_us"  # headline; tag method: nccl-tests (eager) | graph-replay
    ALLREDUCE_PER_CALL_US = "allreduce_per_call_us"  # eager only; method: per-call-events (never the headline)
    ALLREDUCE_ALGBW_GBPS = "allreduce_algbw_gbps"
    ALLREDUCE_BUSBW_GBPS = "allreduce_busbw_gbps"
    ALLREDUCE_CHECK_PASSED = "allreduce_check_passed"
    # verify_step recipe
    VERIFY_TIME_MS = "verify_time_ms"
    VERIFY_COMPUTE_MS = "verify_compute_ms"
    VERIFY_COMM_MS = "verify_comm_ms"
    VERIFY_COMM_ISOLATED_MS = "verify_comm_isolated_ms"
    VERIFY_COMM_SHARE = "verify_comm_share"
    ALLREDUCE_IN_SITU_US = "allreduce_in_situ_us"  # tags tokens, allreduces, layers, bytes
    ALLREDUCE_ISOLATED_US = "allreduce_isolated_us"
    DECODE_STEP_MS = "decode_step_ms"  # verify_step at tokens == 1: the synthetic plain decode step (T_base)
    # moe_step recipe (beside the verify_step names above): the independent check of each point
    COPY_BANDWIDTH_GBPS = "copy_bandwidth_gbps"  # device-to-device copy, bytes read + written / s, measured at start
    STEP_FLOOR_MS = "step_floor_ms"  # bytes the step must read (tag read_bytes) / the copy bandwidth
    STEP_BW_EFFICIENCY = "step_bw_efficiency"  # step_floor_ms / verify_time_ms (1 = at the copy rate)
    # draft_step recipe
    DRAFT_STEP_MS = "draft_step_ms"  # one EAGLE-3 draft head step (decoder layer + LM head)
    # sglang_server recipe
    OUTPUT_THROUGHPUT = "output_throughput_tok_s"  # bench_serving / bench_one_batch_server
    GEN_THROUGHPUT_LOG = "decode_log_gen_throughput_tok_s"  # from Decode batch log lines
    MEDIAN_TPOT_MS = "median_tpot_ms"
    MEDIAN_ITL_MS = "median_itl_ms"
    MEDIAN_TTFT_MS = "median_ttft_ms"
    BENCH_ACCEPT_LENGTH = "accept_length"  # the benchmark's own figure
    SERVER_ACCEPT_LENGTH = "server_avg_spec_accept_length"  # the server's cumulative one (/get_server_info)
    DECODE_LOG_ACCEPT_LEN = "decode_log_accept_len"  # the mean over Decode batch log lines
    PREFLIGHT_S = "preflight_s"  # tag passed
    SERVER_READY_S = "server_ready_s"
    GPU_PROCESSES_AFTER_TEARDOWN = "gpu_processes_after_teardown"
    # engine_acceptance recipe: a live engine's Prometheus counters differenced around a window
    ENGINE_ACCEPT_LENGTH = "engine_accept_length"  # tags draft_tokens (k), speculative_topk, method, derivation
    ENGINE_ACCEPT_RATE_POS = "engine_accept_rate_pos"  # vLLM: accepted at position i / drafts (unconditional)
    ENGINE_ACCEPT_ALPHA_POS = "engine_accept_alpha_pos"  # the conditional alpha_i = u_i / u_(i-1)
    ENGINE_LOG_ACCEPT_LENGTH = "engine_log_accept_length"  # vLLM's SpecDecoding log lines in the same window
    # vllm_server recipe (a real engine, issue 42): every figure tagged with its conditions (engine,
    # engine_version, model, method, draft_tokens, batch, dtype, mode, prompt_set, input_len, output_len,
    # prefix_caching, temperature, ignore_eos) and `spec` (off | on); windows with speculation off and on
    # alternate inside one trial, so a trial yields one paired speedup (its samples: one ratio per pair).
    ENGINE_OUTPUT_TOK_S = "engine_output_tok_s"  # output tokens / window wall time; one sample per window
    ENGINE_TPOT_MS = "engine_tpot_ms"  # time per output token after the first; tag stat: median | p90
    ENGINE_REQUEST_LATENCY_MS = "engine_request_latency_ms"  # tag stat: median | p90
    ENGINE_SPEEDUP = "engine_speedup"  # spec-on / spec-off output tok/s, one ratio per adjacent window pair
    # The engine's step time (spec off: a decode step; on: draft + verify of k tokens), tag method:
    # iteration-counter (window wall / steps counted by vllm:iteration_tokens_total) or tpot-x-tokens-per-step
    # (the independent check: the requests' own TPOT x tokens emitted per step).
    ENGINE_STEP_MS = "engine_step_ms"
    # Accept length, best source first: the engine's counters over the window (exactly the run), the benchmark's
    # figure (bench_serving reads the server's cumulative one), the server's cumulative one, log lines.
    ACCEPT_LENGTH = (
        ENGINE_ACCEPT_LENGTH,
        BENCH_ACCEPT_LENGTH,
        SERVER_ACCEPT_LENGTH,
        DECODE_LOG_ACCEPT_LEN,
        ENGINE_LOG_ACCEPT_LENGTH,
    )
    # Per-position acceptance rates (higher is better, like accept lengths).
    ACCEPT_RATES = (ENGINE_ACCEPT_RATE_POS, ENGINE_ACCEPT_ALPHA_POS)
    THROUGHPUT = (OUTPUT_THROUGHPUT, GEN_THROUGHPUT_LOG)


class ConditionTag:
    """The tags that name the conditions a figure was measured under (issues 33 and 35): the answer pairs
    inputs only where these agree (and the trial's runner stack), never borrowing across them."""

    WORLD_SIZE = "world_size"
    MODE = "mode"  # graph | eager
    CONTEXT = "context"  # KV-cache positions per sequence
    DTYPE = "dtype"  # activations and dense weights
    DEVICE = "device"  # cuda | cpu
    LAYERS = "layers"  # the layer count the figure stands for (scaled to, when fewer were timed)
    HIDDEN = "hidden_size"
    FFN = "ffn_size"
    STANDIN = "standin"  # dense | moe: the recipe's stand-in for the target's compute; absent = dense
    GEOMETRY = "geometry"  # kimi-k2.5 | deepseek-v3 | custom (moe_step); llama (verify_step --geometry llama)
    KV_HEADS = "kv_heads"  # key/value heads of grouped-query attention (the llama geometry)
    VOCAB = "vocab"  # the LM head's vocabulary, when the step computes one (the llama geometry)
    EXPERTS = "experts"  # routed experts per MoE layer (0 or absent: dense)
    EXPERTS_TOP_K = "experts_top_k"
    EXPERTS_DTYPE = "experts_dtype"  # bf16 | fp8 | int4
    EXPERTS_TOUCHED = "experts_touched"  # mean distinct experts read per MoE layer at this point (not a condition)
    LAYERS_TIMED = "layers_timed"  # distinct layers actually timed (not a condition)
    DRAFT_VOCAB = "draft_vocab"  # the draft head's vocabulary
    DRAFT_TOKENS = "draft_tokens"  # k, the point's draft length (a point coordinate, not a condition)
    TOPK = "speculative_topk"  # EAGLE top-k the engine ran (accept lengths)

    # What must agree for two figures to be combined in one answer (plus the trial's stack fingerprint).
    PAIRING = (WORLD_SIZE, MODE, CONTEXT, DTYPE, DEVICE)
    # What must also agree between a decode and a verify step (the same model stand-in).
    GEOMETRY_KEYS = (LAYERS, HIDDEN, FFN, STANDIN, GEOMETRY, EXPERTS, EXPERTS_TOP_K, EXPERTS_DTYPE, KV_HEADS, VOCAB)
    # What a campaign may declare its default answer under (Campaign.answer_conditions).
    DECLARABLE = frozenset((*PAIRING, *GEOMETRY_KEYS, DRAFT_VOCAB, TOPK))


def emit_phase(name: str, *, stream: TextIO | None = None) -> None:
    """Announce a phase; the runner shows it on the trial page while the trial runs."""
    out = stream or sys.stdout
    out.write(f"{PHASE_PREFIX}{name}\n")
    out.flush()


# A metric line may carry the raw samples its value summarises (the comparisons' bootstrap reads them).
MAX_SAMPLES = 1000


def format_metric(
    name: str, value: float, unit: str = "", *, samples: Sequence[float] | None = None, **tags: Any
) -> str:
    """One metric line (without newline); `samples` (at most MAX_SAMPLES finite numbers) travel with it."""
    obj: dict[str, Any] = {"name": name, "value": value, "unit": unit, "tags": tags}
    if samples is not None:
        kept = [float(x) for x in samples]
        if len(kept) > MAX_SAMPLES:
            raise ValueError(f"a metric line carries at most {MAX_SAMPLES} samples, not {len(kept)}")
        obj["samples"] = kept
    return METRIC_PREFIX + json.dumps(obj, sort_keys=True)


def emit(
    name: str,
    value: float,
    unit: str = "",
    *,
    stream: TextIO | None = None,
    samples: Sequence[float] | None = None,
    **tags: Any,
) -> None:
    """Print one metric line and flush, so it reaches the runner when it is measured."""
    out = stream or sys.stdout
    out.write(format_metric(name, value, unit, samples=samples, **tags) + "\n")
    out.flush()


def bounded(samples: Sequence[float]) -> list[float] | None:
    """The samples a recipe attaches to its line: all of them, or None past MAX_SAMPLES (the value stays)."""
    return [float(x) for x in samples] if len(samples) <= MAX_SAMPLES else None


def valid_samples(raw: Any) -> list[float] | None:
    """A line's `samples` when they are a list of at most MAX_SAMPLES finite numbers, else None."""
    if not isinstance(raw, list) or len(raw) > MAX_SAMPLES:
        return None
    out: list[float] = []
    for x in raw:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            return None
        out.append(float(x))
    return out


def parse_metric_line(line: str) -> dict[str, Any] | None:
    """The metric in a log line, or None when the line is not a (valid) metric line."""
    at = line.find(METRIC_PREFIX)
    if at < 0:
        return None
    try:
        obj = json.loads(line[at + len(METRIC_PREFIX) :])
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    value = obj.get("value")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    tags = obj.get("tags") or {}
    if not isinstance(tags, dict):
        return None
    # Samples that break the contract (not numbers, not finite, over MAX_SAMPLES) are left out; the value stays.
    samples = valid_samples(obj["samples"]) if "samples" in obj else None
    return {
        "name": obj["name"],
        "value": float(value),
        "unit": str(obj.get("unit") or ""),
        "tags": tags,
        "samples": samples,
    }
