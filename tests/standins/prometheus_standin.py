"""A stand-in for a speculating vLLM or SGLang server's Prometheus side, for the engine_acceptance recipe.

Real HTTP (stdlib, a free port); the exposition is written by prometheus_client itself, as both engines
write theirs, with each engine's metric names, documentation and label names as read in its source:
  vLLM (vllm/v1/spec_decode/metrics.py SpecDecodingProm; labels model_name, engine):
    vllm:spec_decode_num_drafts_total, vllm:spec_decode_num_draft_tokens_total,
    vllm:spec_decode_num_accepted_tokens_total, vllm:spec_decode_num_accepted_tokens_per_pos_total{position}
    and GET /version {"version": ...}; its SpecDecoding log line, when `log_path` is set.
  SGLang 0.5.23 (srt/observability/metrics_collector.py; labels model_name, engine_type):
    sglang:spec_verify_calls_total, sglang:generation_tokens_total{is_streaming},
    sglang:num_requests_total{is_streaming}, the gauge sglang:spec_accept_length, and GET /server_info
    (/get_server_info) with version, the speculative server args and internal_states[0].avg_spec_accept_length.
Both also export process_start_time_seconds (prometheus_client's process collector on the engines).

Counters advance in *ticks*, each adding a known batch (every tick has the same acceptance), so any whole
number of ticks inside a window gives known ratios: `warmup` ticks of a different acceptance come first, so
a cumulative reading differs from the window's. Ticks come from a background thread every `tick_s` (the
"window" mode) or from POST /v1/completions (the "load" mode: `{"ticks": n}`). POST /standin/restart
starts the counters over (an engine restart). `speculative=False` serves an engine that does not speculate.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest

MODEL = "/models/Kimi-K2.5"


@dataclass(frozen=True)
class Tick:
    """One tick's increments. vLLM: drafts, and accepted tokens per position (chains: non-increasing).
    SGLang: verify calls and the generation tokens they produced."""

    drafts: int = 10
    accepted_per_pos: tuple[int, ...] = (8, 5, 3)
    verify_calls: int = 10
    generation_tokens: int = 26
    requests: int = 1


class EngineStandin:
    def __init__(
        self,
        engine: str,
        *,
        tick: Tick = Tick(),
        warmup: Tick | None = Tick(drafts=10, accepted_per_pos=(10, 10, 10), verify_calls=10, generation_tokens=40),
        warmup_ticks: int = 5,
        tick_s: float | None = 0.05,
        speculative: bool = True,
        version: str | None = None,
        log_path: str | None = None,
    ):
        assert engine in ("vllm", "sglang")
        self.engine, self.tick, self.speculative, self.log_path = engine, tick, speculative, log_path
        self.version = version or ("0.11.0" if engine == "vllm" else "0.5.23")
        self.k = len(tick.accepted_per_pos)
        self.lock = threading.Lock()
        self.ticks = 0
        self.start_time = time.time()
        self._registry()
        for _ in range(warmup_ticks if warmup else 0):
            self.advance(warmup)
        self.ticks = 0  # ticks counts the measured kind only
        self._stop = threading.Event()
        self.tick_s = tick_s
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    # --- the engine's registry ------------------------------------------------------------------
    def _registry(self) -> None:
        self.registry = r = CollectorRegistry()
        self.totals = {"gen": 0, "verify": 0}
        start = Gauge(
            "process_start_time_seconds", "Start time of the process since unix epoch in seconds.", registry=r
        )
        start.set(self.start_time)
        if self.engine == "vllm":
            if not self.speculative:  # SpecDecodingProm returns before creating its counters
                Counter(
                    "vllm:prompt_tokens", "Number of prefill tokens processed.", ["model_name", "engine"], registry=r
                )
                return
            labels = ["model_name", "engine"]
            lv = (MODEL, "0")
            self.drafts = Counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", labels, registry=r)
            self.draft_tokens = Counter(
                "vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", labels, registry=r
            )
            self.accepted = Counter(
                "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", labels, registry=r
            )
            per_pos = Counter(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                [*labels, "position"],
                registry=r,
            )
            self.drafts, self.draft_tokens, self.accepted = (
                c.labels(*lv) for c in (self.drafts, self.draft_tokens, self.accepted)
            )
            self.per_pos = [per_pos.labels(*lv, str(p)) for p in range(self.k)]
        else:
            labels = ["model_name", "engine_type"]
            self.verify = Counter(
                "sglang:spec_verify_calls", "Number of speculative decoding verification calls.", labels, registry=r
            )
            self.generation = Counter(
                "sglang:generation_tokens",
                "Number of generation tokens processed.",
                [*labels, "is_streaming"],
                registry=r,
            )
            self.requests = Counter(
                "sglang:num_requests", "Number of requests processed.", [*labels, "is_streaming"], registry=r
            )
            self.gauge = Gauge(
                "sglang:spec_accept_length",
                "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
                labels,
                multiprocess_mode="mostrecent",
                registry=r,
            )

    def advance(self, tick: Tick | None = None, n: int = 1) -> None:
        tick = tick or self.tick
        with self.lock:
            for _ in range(n):
                self.ticks += 1
                if self.engine == "vllm" and self.speculative:
                    self.drafts.inc(tick.drafts)
                    self.draft_tokens.inc(tick.drafts * self.k)
                    self.accepted.inc(sum(tick.accepted_per_pos))
                    for counter, a in zip(self.per_pos, tick.accepted_per_pos, strict=True):
                        counter.inc(a)
                    self._log(tick)
                elif self.engine == "sglang":
                    self.generation.labels(MODEL, "unified", "true").inc(tick.generation_tokens)
                    self.requests.labels(MODEL, "unified", "true").inc(tick.requests)
                    self.totals["gen"] += tick.generation_tokens
                    if self.speculative:
                        self.verify.labels(MODEL, "unified").inc(tick.verify_calls)
                        self.gauge.labels(MODEL, "unified").set(tick.generation_tokens / tick.verify_calls)
                        self.totals["verify"] += tick.verify_calls
                        self._log(tick)

    def _log(self, tick: Tick) -> None:
        if not self.log_path:
            return
        with open(self.log_path, "a") as fh:
            if self.engine == "vllm":
                acc, drafted = sum(tick.accepted_per_pos), tick.drafts * self.k
                rates = ", ".join(f"{a / tick.drafts:.3f}" for a in tick.accepted_per_pos)
                fh.write(
                    "INFO 12-03 09:00:00 [metrics.py:96] SpecDecoding metrics: "
                    f"Mean acceptance length: {1 + acc / tick.drafts:.2f}, Accepted throughput: 40.00 tokens/s, "
                    f"Drafted throughput: 75.00 tokens/s, Accepted: {acc} tokens, Drafted: {drafted} tokens, "
                    f"Per-position acceptance rate: {rates}, Avg Draft acceptance rate: {100 * acc / drafted:.1f}%\n"
                )
            else:
                fh.write(
                    "[2026-12-03 09:00:00] Decode batch, #running-req: 1, #token: 812, token usage: 0.01, "
                    f"accept len: {tick.generation_tokens / tick.verify_calls:.2f}, accept rate: 0.53, "
                    "cuda graph: True, gen throughput (token/s): 81.93, #queue-req: 0\n"
                )

    def restart(self, *, new_process: bool = False) -> None:
        """Counters start over, as after an engine restart; `new_process` also moves process_start_time_seconds
        (else it is kept, as when only a worker restarts)."""
        with self.lock:
            if new_process:
                self.start_time += 1.0
            self._registry()

    def server_info(self) -> dict[str, Any]:
        avg = self.totals["gen"] / self.totals["verify"] if self.totals["verify"] else None
        spec = self.speculative
        return {
            "model_path": MODEL,
            "tp_size": 8,
            "speculative_algorithm": "EAGLE3" if spec else None,
            "speculative_num_steps": self.k if spec else None,
            "speculative_eagle_topk": 1 if spec else None,
            "speculative_num_draft_tokens": self.k + 1 if spec else None,
            "version": self.version,
            "internal_states": [{"avg_spec_accept_length": avg} if spec and avg else {}],
        }

    # --- HTTP --------------------------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_a: Any) -> None:
                pass

            def _send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path == "/metrics":
                    with standin.lock:
                        body = generate_latest(standin.registry)
                    self._send(200, body, CONTENT_TYPE_LATEST)
                elif self.path == "/version" and standin.engine == "vllm":
                    self._send(200, json.dumps({"version": standin.version}).encode())
                elif self.path in ("/server_info", "/get_server_info") and standin.engine == "sglang":
                    self._send(200, json.dumps(standin.server_info()).encode())
                elif self.path == "/health":
                    self._send(200, b"{}")
                else:
                    self._send(404, b'{"detail": "Not Found"}')

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path == "/v1/completions":
                    standin.advance(n=int(body.get("ticks", 1)))
                    self._send(200, json.dumps({"ticks": standin.ticks}).encode())
                elif self.path == "/standin/restart":
                    standin.restart(new_process=bool(body.get("new_process")))
                    self._send(200, b"{}")
                else:
                    self._send(404, b'{"detail": "Not Found"}')

        return Handler

    def _ticker(self) -> None:
        assert self.tick_s is not None
        while not self._stop.wait(self.tick_s):
            self.advance()

    def __enter__(self) -> EngineStandin:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        if self.tick_s is not None:
            threading.Thread(target=self._ticker, daemon=True).start()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()


def drive(url: str, ticks: int, *, restart_first: bool = False, new_process: bool = False) -> None:
    """What a load command does to the stand-in: (restart it, then) POST completions worth `ticks` ticks."""
    import urllib.request

    def post(path: str, body: dict[str, Any]) -> None:
        request = urllib.request.Request(
            url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            resp.read()

    if restart_first:
        post("/standin/restart", {"new_process": new_process})
    post("/v1/completions", {"ticks": ticks})


if __name__ == "__main__":  # python -m tests.standins.prometheus_standin URL TICKS [--restart [--new-process]]
    import sys

    drive(
        sys.argv[1],
        int(sys.argv[2]),
        restart_first="--restart" in sys.argv[3:],
        new_process="--new-process" in sys.argv,
    )
