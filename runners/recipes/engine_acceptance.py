"""Read a running vLLM or SGLang server's speculative acceptance from its Prometheus /metrics over a window.

    python -m runners.recipes.engine_acceptance --url http://127.0.0.1:8000 --window-s 60
    python -m runners.recipes.engine_acceptance --url http://127.0.0.1:30000 \
        --load-arg=python3 --load-arg=-m --load-arg=sglang.bench_serving ...

Scrape /metrics, wait the window (or run the load command: the window is its run), scrape again, and
difference the counters around the window (method `prometheus-counter-delta`): a cumulative figure read
once mixes everything the server did since it started (warm-up traffic included), so it is only ever an
independent check here, flagged as cumulative. A counter that went down (or a changed
`process_start_time_seconds`) means the engine restarted inside the window: refused.

vLLM (`vllm:spec_decode_*` counters): accept length 1 + accepted / drafts at k = the engine's positions;
per position i (1-based; vLLM's `position` label is i - 1) the unconditional rate u_i = accepted at i /
drafts and the conditional alpha_i = u_i / u_(i-1) (u_0 = 1); where every draft proposed k tokens, also
tau(j) = 1 + u_1 + ... + u_j for j < k (a chain's first j positions are the run a j-token draft makes).
SGLang (`sglang:spec_verify_calls_total`, `sglang:generation_tokens_total`, counted as requests finish):
accept length = generation tokens / verify calls, SGLang's own definition (its per-request
`spec_accept_length`); SGLang exposes no per-position counters.

Exit codes: 0 read; 1 the load command failed; 2 bad parameters; 3 server unreachable (or no /metrics);
4 no speculative decoding (or no counters to difference); 5 counters reset in the window; 6 no drafts
in the window. Needs prometheus_client (the runner extra; every vLLM and SGLang environment has it).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.protocol.metrics import ConditionTag as C
from app.protocol.metrics import MetricName as M
from app.protocol.metrics import emit, emit_phase
from app.protocol.recipes import RecipeError
from app.protocol.sglang_output import accept_length_from_server_info, parse_decode_line
from runners.recipes._params import Param, cli_values, module_recipe
from runners.recipes._params import validate as _validate

PROG = "runners.recipes.engine_acceptance"
METHOD = "prometheus-counter-delta"
EXIT_LOAD, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_NO_SPEC, EXIT_RESET, EXIT_NO_DRAFTS = 1, 2, 3, 4, 5, 6
ENGINES = ("auto", "vllm", "sglang")

# The engines' counter families as prometheus_client's parser names them (the `_total` suffix stripped).
VLLM_DRAFTS = "vllm:spec_decode_num_drafts"
VLLM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
VLLM_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
SGLANG_VERIFY_CALLS = "sglang:spec_verify_calls"
SGLANG_GENERATION_TOKENS = "sglang:generation_tokens"
SGLANG_REQUESTS = "sglang:num_requests"
SGLANG_ACCEPT_GAUGE = "sglang:spec_accept_length"  # the last log interval's mean: a gauge, never differenced
START_TIME = "process_start_time_seconds"

# vLLM's periodic log line (SpecDecodingLogging.log) and what the recipe reads of it.
VLLM_LOG_LINE = re.compile(
    r"SpecDecoding metrics: Mean acceptance length: (?P<mean>[0-9.]+).*?"
    r"Accepted: (?P<accepted>\d+) tokens, Drafted: (?P<drafted>\d+) tokens"
    r"(?:, Per-position acceptance rate: (?P<rates>[0-9., ]*[0-9]))?"
)


def log_line_drafts(line: re.Match[str], k: int) -> float:
    """How many drafts one SpecDecoding line covers. The line prints no draft count, but its per-position rates
    are accepted-at-i / drafts, so drafts = accepted / (sum of the rates) (the rates carry 3 decimals: the count
    is rounded to a whole draft). A line that accepted nothing (or prints no rates) falls back to drafted / k,
    exact only where every draft proposed k tokens (an n-gram drafter proposes fewer when it finds no match)."""
    accepted = int(line.group("accepted"))
    rates = [float(r) for r in (line.group("rates") or "").split(",") if r.strip()]
    if accepted and sum(rates) > 0:
        return float(round(accepted / sum(rates)))
    return int(line.group("drafted")) / k


SPEC = (
    Param("url", "str", None, "the server's base URL, e.g. http://127.0.0.1:8000", required=True),
    Param("engine", "choice", "auto", "vllm, sglang, or auto (from the metric names)", choices=ENGINES),
    Param("window_s", "float", 60.0, "seconds between the two scrapes when no load command is given", minimum=0.1),
    Param("load_args", "str_list", [], "one argv element of a load command; the window is its run (repeat)"),
    Param("load_timeout_s", "float", 3600.0, "give up on the load command after this", minimum=1),
    Param("settle_s", "float", 1.0, "wait after the window before the second scrape (counters land late)", minimum=0),
    Param("num_speculative_tokens", "int", None, "k the engine was launched with (checked against it)", minimum=1),
    Param("speculative_topk", "int", None, "EAGLE top-k the engine runs (vLLM: 1, chains, unless given)", minimum=1),
    Param("speculative_method", "str", None, "the speculative method (vLLM's `method`; SGLang reports its own)"),
    Param("engine_log", "str", None, "the server's log file: its lines written in the window are read too"),
    Param("http_timeout_s", "float", 10.0, "limit for each HTTP request", minimum=0.1),
)
_CLI_RENAMES = {"load_args": "--load-arg"}


def validate(params: dict[str, Any]) -> dict[str, Any]:
    values = _validate(params, SPEC)
    if not re.match(r"^https?://[^/\s]+", values["url"]):
        raise RecipeError(
            f"params.url (--url): must be an http(s) URL like http://127.0.0.1:8000, got {values['url']!r}"
        )
    values["url"] = values["url"].rstrip("/")
    for item in values["load_args"]:
        if "\n" in item or "\x00" in item:
            raise RecipeError(f"params.load_args: argv elements cannot contain newlines or NUL: {item!r}")
    return values


RECIPE = module_recipe(PROG, SPEC, validate)


class Refused(Exception):
    """The window cannot be read; the message says why, `code` is the exit code."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


# --- reading the engine -----------------------------------------------------------------------


def http_get(url: str, timeout: float) -> tuple[int, bytes]:
    """(status, body); status 0 when the server cannot be reached."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read() if exc.fp else b""
    except (urllib.error.URLError, OSError) as exc:
        raise Refused(EXIT_UNREACHABLE, f"engine_acceptance: cannot reach {url}: {exc}") from None


def get_json(url: str, timeout: float) -> Any:
    status, body = http_get(url, timeout)
    if status != 200:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


@dataclass
class Scrape:
    """One /metrics exposition: per counter family, each series' value by its labels; gauges likewise."""

    at: float
    counters: dict[str, dict[tuple[tuple[str, str], ...], float]] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)
    histograms: dict[str, tuple[float, float]] = field(default_factory=dict)  # (`_count`, `_sum`) over series

    def histogram(self, family: str) -> tuple[float, float]:
        """(observations, their sum) of a histogram (vllm:iteration_tokens_total: one per engine step)."""
        return self.histograms.get(family, (0.0, 0.0))

    def total(self, family: str, **match: str) -> float:
        """The family summed over its series (those whose labels include `match`)."""
        return sum(
            v for labels, v in self.counters.get(family, {}).items() if all((k, w) in labels for k, w in match.items())
        )

    def label_values(self, family: str, label: str) -> list[str]:
        return sorted({dict(labels)[label] for labels in self.counters.get(family, {}) if label in dict(labels)})


def parse_exposition(text: str, at: float) -> Scrape:
    """The counters and gauges of an exposition, read with prometheus_client's own parser."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        raise Refused(
            EXIT_USAGE,
            f"engine_acceptance: prometheus_client is not installed for {sys.executable} (install the runner extra, "
            "or run the recipe with the engine's python, which has it)",
        ) from None

    scrape = Scrape(at)
    for family in text_string_to_metric_families(text):
        scrape.names.add(family.name)
        if family.type == "counter":
            series = scrape.counters.setdefault(family.name, {})
            for sample in family.samples:
                if sample.name == family.name + "_total":  # not the `_created` timestamps
                    key = tuple(sorted(sample.labels.items()))
                    series[key] = series.get(key, 0.0) + float(sample.value)
        elif family.type == "gauge" and family.samples:
            scrape.gauges[family.name] = float(family.samples[-1].value)
        elif family.type == "histogram":
            scrape.histograms[family.name] = (
                sum(float(s.value) for s in family.samples if s.name == family.name + "_count"),
                sum(float(s.value) for s in family.samples if s.name == family.name + "_sum"),
            )
    return scrape


def scrape_metrics(url: str, timeout: float) -> Scrape:
    status, body = http_get(url + "/metrics", timeout)
    if status != 200:
        hint = " (SGLang serves it only with --enable-metrics)" if status == 404 else ""
        raise Refused(EXIT_UNREACHABLE, f"engine_acceptance: GET {url}/metrics answered {status}{hint}")
    try:
        return parse_exposition(body.decode("utf-8", "replace"), time.monotonic())
    except ValueError as exc:
        raise Refused(
            EXIT_UNREACHABLE, f"engine_acceptance: {url}/metrics is not a Prometheus exposition: {exc}"
        ) from None


def detect_engine(scrape: Scrape, asked: str) -> str:
    if asked != "auto":
        return asked
    prefixes = {name.split(":", 1)[0] for name in scrape.names if ":" in name}
    if "vllm" in prefixes:
        return "vllm"
    if "sglang" in prefixes:
        return "sglang"
    raise Refused(EXIT_NO_SPEC, "engine_acceptance: the exposition has no vllm: or sglang: metrics; pass --engine")


def _field(info: Any, name: str) -> Any:
    """A server_info field, at the top level or one record down (newer releases nest server args)."""
    if not isinstance(info, dict):
        return None
    if name in info:
        return info[name]
    return next((v[name] for v in info.values() if isinstance(v, dict) and name in v), None)


def check_resets(before: Scrape, after: Scrape, families: Sequence[str]) -> None:
    b, a = before.gauges.get(START_TIME), after.gauges.get(START_TIME)
    if b is not None and a is not None and a != b:
        raise Refused(
            EXIT_RESET, f"engine_acceptance: the engine restarted in the window ({START_TIME} {b:g} -> {a:g})"
        )
    for family in families:
        for labels, was in before.counters.get(family, {}).items():
            now = after.counters.get(family, {}).get(labels, 0.0)
            if now < was:
                where = ",".join(f"{k}={v}" for k, v in labels)
                raise Refused(
                    EXIT_RESET,
                    f"engine_acceptance: counter {family}_total{{{where}}} went down ({was:g} -> {now:g}) in the "
                    "window: the engine restarted or reset its counters; the window cannot be differenced",
                )


# --- the window -------------------------------------------------------------------------------


def run_window(values: dict[str, Any]) -> str:
    """Wait the window, or run the load command through it; returns how the window was made."""
    if not values["load_args"]:
        time.sleep(values["window_s"])
        return "sleep"
    argv = values["load_args"]
    print("engine_acceptance: load " + json.dumps(argv), flush=True)
    try:
        done = subprocess.run(argv, timeout=values["load_timeout_s"], stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise Refused(EXIT_LOAD, f"engine_acceptance: cannot start the load command {argv[0]!r}: {exc}") from None
    except subprocess.TimeoutExpired:
        raise Refused(
            EXIT_LOAD, f"engine_acceptance: the load command did not finish within {values['load_timeout_s']:g}s"
        ) from None
    if done.returncode != 0:
        raise Refused(EXIT_LOAD, f"engine_acceptance: the load command exited with code {done.returncode}")
    return "load"


def log_offset(path: str | None) -> int:
    if not path:
        return 0
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def log_lines_since(path: str | None, offset: int) -> list[str]:
    if not path:
        return []
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read().decode("utf-8", "replace").splitlines()
    except OSError as exc:
        print(f"engine_acceptance: engine log {path!r} not read: {exc}", flush=True)
        return []


# --- the figures ------------------------------------------------------------------------------


def require_speculation(engine: str, scrape: Scrape, info: Any) -> None:
    """Refuse, before any window is spent, a server that does not speculate or has nothing to difference."""
    if engine == "vllm" and VLLM_DRAFTS not in scrape.names:
        raise Refused(
            EXIT_NO_SPEC,
            f"engine_acceptance: this vLLM server runs no speculative decoding (no {VLLM_DRAFTS}_total in /metrics; "
            "launch it with --speculative-config)",
        )
    if engine == "sglang" and info is not None and not _field(info, "speculative_algorithm"):
        raise Refused(
            EXIT_NO_SPEC,
            "engine_acceptance: this SGLang server runs no speculative decoding (server_info speculative_algorithm "
            "is null; launch it with --speculative-algorithm)",
        )
    if engine == "sglang" and SGLANG_VERIFY_CALLS not in scrape.names:
        raise Refused(
            EXIT_NO_SPEC,
            f"engine_acceptance: this SGLang exposes no {SGLANG_VERIFY_CALLS}_total counter (0.5.23 has it) and "
            f"its {SGLANG_ACCEPT_GAUGE} is a gauge of the last log interval: nothing to difference",
        )


def vllm_figures(before: Scrape, after: Scrape, values: dict[str, Any], tags: dict[str, Any], lines: list[str]) -> None:
    families = (VLLM_DRAFTS, VLLM_DRAFT_TOKENS, VLLM_ACCEPTED, VLLM_ACCEPTED_PER_POS)
    check_resets(before, after, families)
    drafts = after.total(VLLM_DRAFTS) - before.total(VLLM_DRAFTS)
    draft_tokens = after.total(VLLM_DRAFT_TOKENS) - before.total(VLLM_DRAFT_TOKENS)
    accepted = after.total(VLLM_ACCEPTED) - before.total(VLLM_ACCEPTED)
    positions = sorted(int(p) for p in after.label_values(VLLM_ACCEPTED_PER_POS, "position"))
    k = len(positions)
    if positions != list(range(k)) or k == 0:
        raise Refused(EXIT_NO_SPEC, f"engine_acceptance: {VLLM_ACCEPTED_PER_POS}_total has positions {positions}")
    if values["num_speculative_tokens"] is not None and values["num_speculative_tokens"] != k:
        raise Refused(
            EXIT_NO_SPEC,
            f"engine_acceptance: the engine counts {k} draft positions, not the {values['num_speculative_tokens']} "
            "num_speculative_tokens given",
        )
    if drafts < 1:
        raise Refused(EXIT_NO_DRAFTS, "engine_acceptance: no drafts in the window (was the server under load?)")
    per_pos = [
        after.total(VLLM_ACCEPTED_PER_POS, position=str(p)) - before.total(VLLM_ACCEPTED_PER_POS, position=str(p))
        for p in positions
    ]
    uniform = draft_tokens == k * drafts
    tags.update(
        {
            C.DRAFT_TOKENS: k,
            "num_speculative_tokens": k,
            C.TOPK: values["speculative_topk"] or 1,
            "window_drafts": int(drafts),
            "window_draft_tokens": int(draft_tokens),
            "window_accepted_tokens": int(accepted),
            "draft_tokens_per_draft": round(draft_tokens / drafts, 4),
            "per_position_sum_matches": sum(per_pos) == accepted,
        }
    )
    if not uniform:
        print(
            f"engine_acceptance: drafts proposed {draft_tokens / drafts:.3f} tokens on average, not {k} (dynamic "
            "speculation, or sequences near their end): only the accept length at k is emitted",
            flush=True,
        )
    rates = [a / drafts for a in per_pos]
    tau = 1 + accepted / drafts
    base = {key: v for key, v in tags.items() if key != C.DRAFT_TOKENS}
    if uniform:  # tau(j) for j < k, then the measured one last (readers that take one take the last)
        for j in range(1, k):
            emit(
                M.ENGINE_ACCEPT_LENGTH,
                1 + sum(rates[:j]),
                "",
                **{**base, C.DRAFT_TOKENS: j},
                derivation=f"1 + sum of per-position rates to {j} (of a {k}-token run)",
            )
    emit(M.ENGINE_ACCEPT_LENGTH, tau, "", **tags, derivation="1 + accepted / drafts")
    previous = 1.0
    for i, u in enumerate(rates, start=1):
        emit(M.ENGINE_ACCEPT_RATE_POS, u, "", **tags, position=i, rate="unconditional: accepted at i / drafts")
        if previous > 0:
            emit(M.ENGINE_ACCEPT_ALPHA_POS, u / previous, "", **tags, position=i, rate="conditional: u_i / u_(i-1)")
        previous = u
    logged = [m for m in (VLLM_LOG_LINE.search(line) for line in lines) if m]
    line_drafts = sum(log_line_drafts(m, k) for m in logged)
    if line_drafts:
        emit(
            M.ENGINE_LOG_ACCEPT_LENGTH,
            1 + sum(int(m.group("accepted")) for m in logged) / line_drafts,
            "",
            **{**tags, "method": "vllm-log-lines"},
            lines=len(logged),
            derivation="1 + accepted / drafts over the SpecDecoding log lines written in the window (a line's drafts: "
            "its accepted tokens over the sum of its per-position rates)",
        )


def sglang_figures(
    before: Scrape, after: Scrape, info: Any, values: dict[str, Any], tags: dict[str, Any], lines: list[str]
) -> None:
    algorithm = _field(info, "speculative_algorithm")
    families = (SGLANG_VERIFY_CALLS, SGLANG_GENERATION_TOKENS, SGLANG_REQUESTS)
    check_resets(before, after, families)
    verify = after.total(SGLANG_VERIFY_CALLS) - before.total(SGLANG_VERIFY_CALLS)
    generated = after.total(SGLANG_GENERATION_TOKENS) - before.total(SGLANG_GENERATION_TOKENS)
    requests = after.total(SGLANG_REQUESTS) - before.total(SGLANG_REQUESTS)
    if verify < 1:
        raise Refused(
            EXIT_NO_DRAFTS,
            "engine_acceptance: no verify calls in the window (SGLang counts them as requests finish: was there "
            "load, and did its requests end inside the window?)",
        )
    steps = _field(info, "speculative_num_steps") or values["num_speculative_tokens"]
    topk = _field(info, "speculative_eagle_topk") or values["speculative_topk"]
    num_draft = _field(info, "speculative_num_draft_tokens")
    if values["num_speculative_tokens"] is not None and steps != values["num_speculative_tokens"]:
        raise Refused(
            EXIT_NO_SPEC,
            f"engine_acceptance: the server runs speculative_num_steps {steps}, not the "
            f"{values['num_speculative_tokens']} given",
        )
    tags.update(
        {
            "speculative_algorithm": algorithm or values["speculative_method"] or "unknown",
            "window_verify_calls": int(verify),
            "window_drafts": int(verify),
            "window_generation_tokens": int(generated),
            "window_accepted_tokens": int(generated - verify),
            "window_requests": int(requests),
        }
    )
    if steps is not None:
        tags[C.DRAFT_TOKENS] = int(steps)
        tags["speculative_num_steps"] = int(steps)
    if topk is not None:
        tags[C.TOPK] = int(topk)
    if num_draft is not None:
        tags["speculative_num_draft_tokens"] = int(num_draft)
        tags["window_draft_tokens"] = int(verify * (int(num_draft) - 1))  # as SGLang counts proposed drafts
    if SGLANG_ACCEPT_GAUGE in after.gauges:
        tags["gauge_spec_accept_length"] = after.gauges[SGLANG_ACCEPT_GAUGE]  # the last log interval only
    emit(
        M.ENGINE_ACCEPT_LENGTH,
        generated / verify,
        "",
        **tags,
        derivation="generation tokens / verify calls (SGLang's definition; each request's prefill token included)",
    )
    cumulative = accept_length_from_server_info(info)
    if cumulative is not None:
        emit(
            M.SERVER_ACCEPT_LENGTH,
            cumulative,
            "",
            **{**tags, "method": "server-info-cumulative"},
            source="server_info",
            cumulative=True,
            derivation="internal_states[0].avg_spec_accept_length, accumulated since server start (not the window)",
        )
    decode = [stats for stats in (parse_decode_line(line) for line in lines) if stats]
    if decode:
        emit(
            M.DECODE_LOG_ACCEPT_LEN,
            sum(a for a, _ in decode) / len(decode),
            "",
            **{**tags, "method": "decode-log-lines"},
            lines=len(decode),
        )


def read(values: dict[str, Any]) -> int:
    url, timeout = values["url"], values["http_timeout_s"]
    emit_phase("scraping before the window")
    before = scrape_metrics(url, timeout)
    engine = detect_engine(before, values["engine"])
    if engine == "vllm":
        version_doc = get_json(url + "/version", timeout)
        version = version_doc.get("version") if isinstance(version_doc, dict) else None
        info = None
    else:
        info = get_json(url + "/server_info", timeout) or get_json(url + "/get_server_info", timeout)
        version = _field(info, "version")
    print(f"engine_acceptance: {engine} {version or '(version unknown)'} at {url}", flush=True)
    require_speculation(engine, before, info)
    offset = log_offset(values["engine_log"])
    emit_phase("window (load running)" if values["load_args"] else f"window ({values['window_s']:g} s)")
    how = run_window(values)
    if values["settle_s"]:
        time.sleep(values["settle_s"])
    emit_phase("scraping after the window")
    after = scrape_metrics(url, timeout)
    if engine == "sglang":
        info = get_json(url + "/server_info", timeout) or get_json(url + "/get_server_info", timeout) or info
    lines = log_lines_since(values["engine_log"], offset)
    tags: dict[str, Any] = {
        "engine": engine,
        "engine_version": str(version) if version else "unknown",
        "method": METHOD,
        "window_s": round(after.at - before.at, 3),
        "window": how,
        "server": url,
    }
    if engine == "vllm":
        tags["speculative_method"] = values["speculative_method"] or "unknown"
        vllm_figures(before, after, values, tags, lines)
    else:
        sglang_figures(before, after, info, values, tags, lines)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    values = cli_values(PROG, __doc__, SPEC, argv, validate, _CLI_RENAMES)
    try:
        return read(values)
    except Refused as exc:
        print(str(exc), flush=True)
        return exc.code


if __name__ == "__main__":
    sys.exit(main())
