#!/usr/bin/env python3
"""A stand-in for an SGLang environment's `python`, for testing the sglang_server recipe.

Used as `--sglang-python tests/standins/sglang_standin.py`; it dispatches like the interpreter would:
  -c "import sglang; print(sglang.__version__)"   prints $SGLANG_STANDIN_VERSION (default 0.5.9)
  -m sglang.launch_server ...                      a real HTTP server (stdlib) with SGLang's log lines,
                                                   /health (503 while starting, 200 when up),
                                                   /server_info and /get_server_info
  -m sglang.bench_serving ...                      queries the server, prints bench_serving's summary
                                                   (label padded to 40 columns, .2f) and appends a JSON line
  -m sglang.bench_one_batch_server ...             appends bench_one_batch_server's JSON line
Only the formats documented in shared/domain.md are imitated; nothing here was checked against a
real server beyond those formats.

Behaviour of launch_server, from $SGLANG_STANDIN_MODE:
  ready (default)   logs startup, prints the ready line after $SGLANG_STANDIN_READY_DELAY_S (0.3)
  health_only       becomes ready (GET /health 200) but never prints the ready line
  crash             logs startup, then a traceback (`KeyError: 12` in symmetric memory) and exits 1
  never_ready       serves /health 503 forever
  ignore_term       like ready, but ignores SIGTERM (teardown must SIGKILL the group)
It also starts a helper child process (as SGLang starts scheduler processes) and writes
"<server pid> <helper pid>" to $SGLANG_STANDIN_PIDFILE when set.
Preflight probes (`-m runners.preflight.probes NAME`) answer as the node $SGLANG_STANDIN_NODE would:
  h200 (default)        8 GPUs, SM 9.0, every probe passes
  rtxpro6000-torch210   SM 12.0: symm_mem fails with `KeyError: 12`, jit_target with nvcc's
                        "Unsupported gpu architecture 'compute_120a'" (the seed campaign's dead ends)
  cpu                   runs the real probe, which finds no GPU
Flags it does not know give argparse's `launch_server.py: error: unrecognized arguments: ...`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERSION = os.environ.get("SGLANG_STANDIN_VERSION", "0.5.9")
READY_LINE = "The server is fired up and ready to roll!"
# The numbers the stand-in's benchmarks report (tests compare the parsed metrics with these).
RESULT = {
    "output_throughput": 81.93,
    "median_tpot_ms": 12.21,
    "median_itl_ms": 12.05,
    "median_ttft_ms": 95.4,
    "accept_length": 2.41,
}
AVG_SPEC_ACCEPT_LENGTH = 2.37


def log(msg: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}] {msg}", flush=True)


def server_parser() -> argparse.ArgumentParser:
    """The flags this stand-in's sglang knows; $SGLANG_STANDIN_MISSING_FLAGS (comma list) removes some,
    as an older sglang lacks them (0.5.9 has no --enable-torch-symm-mem, say)."""
    missing = set(filter(None, os.environ.get("SGLANG_STANDIN_MISSING_FLAGS", "").split(",")))
    parser = argparse.ArgumentParser(prog="launch_server.py")
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--tp-size", type=int, default=1)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    for flag in (
        "--enable-torch-symm-mem",
        "--disable-custom-all-reduce",
        "--enable-mscclpp",
        "--enable-flashinfer-allreduce-fusion",
        "--disable-cuda-graph",
        "--enable-metrics",
    ):
        parser.add_argument(flag, action="store_true")
    for flag in (
        "--speculative-algorithm",
        "--speculative-draft-model-path",
        "--ep-size",
        "--cuda-graph-max-bs",
        "--moe-a2a-backend",
    ):
        parser.add_argument(flag)
    for flag in ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens"):
        parser.add_argument(flag, type=int)
    for action in list(parser._actions):
        if set(action.option_strings) & missing:
            parser._remove_action(action)
            for opt in action.option_strings:
                parser._option_string_actions.pop(opt, None)
    return parser


def launch_server(argv: list[str]) -> int:
    args = server_parser().parse_args(argv)  # unknown flags: exit 2 with argparse's message, as SGLang does

    mode = os.environ.get("SGLANG_STANDIN_MODE", "ready")
    if mode == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ignore = "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if mode == "ignore_term" else ""
    helper = subprocess.Popen([sys.executable, "-c", f"import signal, time\n{ignore}while True: time.sleep(1)"])
    if os.environ.get("SGLANG_STANDIN_PIDFILE"):
        with open(os.environ["SGLANG_STANDIN_PIDFILE"], "w") as fh:
            fh.write(f"{os.getpid()} {helper.pid}\n")

    log(
        f"server_args=ServerArgs(model_path='{args.model_path}', tp_size={args.tp_size}, host='{args.host}', "
        f"port={args.port}, enable_torch_symm_mem={args.enable_torch_symm_mem}, "
        f"speculative_algorithm={args.speculative_algorithm!r})"
    )
    state = {"ready": False}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_a):  # keep the log to SGLang's own lines
            pass

        def _json(self, code: int, obj) -> None:
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/health":
                self._json(200 if state["ready"] else 503, {})
            elif self.path == "/v1/models":  # the real bench_serving's readiness probe and model name
                if not state["ready"]:
                    self._json(503, {})
                else:
                    self._json(
                        200,
                        {
                            "object": "list",
                            "data": [
                                {
                                    "id": args.model_path,
                                    "object": "model",
                                    "owned_by": "sglang",
                                    "root": args.model_path,
                                }
                            ],
                        },
                    )
            elif self.path == "/model_info":
                self._json(
                    200, {"model_path": args.model_path, "tokenizer_path": args.model_path, "is_generation": True}
                )
            elif self.path in ("/server_info", "/get_server_info"):
                self._json(
                    200,
                    {
                        "version": VERSION,
                        "tp_size": args.tp_size,
                        "internal_states": [
                            {
                                "avg_spec_accept_length": AVG_SPEC_ACCEPT_LENGTH,
                                "last_gen_throughput": RESULT["output_throughput"],
                            }
                        ],
                    },
                )
            else:
                self._json(404, {"detail": "Not Found"})

        def do_POST(self):
            if self.path == "/generate":
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    body = {}
                for i, accept in enumerate((2.41, 2.38, 2.44)):
                    log(
                        f"Decode batch, #running-req: 1, #token: {812 + 40 * i}, token usage: 0.01, "
                        f"accept len: {accept:.2f}, accept rate: 0.60, cuda graph: True, "
                        f"gen throughput (token/s): {RESULT['output_throughput'] + i:.2f}, #queue-req: 0"
                    )
                tokens = int((body.get("sampling_params") or {}).get("max_new_tokens") or 16)
                prompt = len(body.get("input_ids") or []) or len(str(body.get("text") or "").split())
                if not body.get("stream"):
                    self._json(
                        200, {"text": "standin", "meta_info": {"completion_tokens": tokens, "prompt_tokens": prompt}}
                    )
                    return
                # Streamed as sglang's /generate does: `data: {json}` events, cumulative text, then [DONE].
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for k in range(1, tokens + 1):
                    event = {
                        "text": " ".join(f"w{j % 200}" for j in range(k)),
                        "meta_info": {
                            "completion_tokens": k,
                            "prompt_tokens": prompt,
                            "spec_accept_length": RESULT["accept_length"],
                        },
                    }
                    self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                    self.wfile.flush()
                    time.sleep(0.001)
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            elif self.path == "/flush_cache":
                self._json(200, {})
            else:
                self._json(404, {"detail": "Not Found"})

    httpd = ThreadingHTTPServer((args.host, args.port), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    log("Load weight begin. avail mem=139.20 GB")
    time.sleep(0.05)
    if mode == "crash":
        log("Init torch distributed begin.")
        print(
            "Traceback (most recent call last):\n"
            '  File "/opt/sglang/python/sglang/srt/distributed/device_communicators/torch_symm_mem.py", '
            "line 63, in __init__\n"
            "    max_size = SYMM_MEM_ALL_REDUCE_MAX_SIZES[self.device_capability][self.world_size]\n"
            "KeyError: 12",
            flush=True,
        )
        helper.kill()
        return 1
    if mode == "never_ready":
        while True:
            time.sleep(1)
    time.sleep(float(os.environ.get("SGLANG_STANDIN_READY_DELAY_S", "0.3")))
    log("Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=40.11 GB")
    state["ready"] = True
    if mode != "health_only":
        log(READY_LINE)
    while True:
        time.sleep(1)


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status
    except Exception:
        return 0


def _generate(base: str) -> None:
    req = urllib.request.Request(
        base + "/generate",
        data=json.dumps({"input_ids": [1, 2, 3]}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        resp.read()


def bench_serving(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench_serving.py")
    for flag in ("--backend", "--host", "--dataset-name", "--output-file"):
        parser.add_argument(flag)
    for flag in ("--port", "--num-prompts", "--random-input-len", "--random-output-len", "--max-concurrency"):
        parser.add_argument(flag, type=int)
    args = parser.parse_args(argv)
    base = f"http://{args.host or '127.0.0.1'}:{args.port}"
    if _get(base + "/health") != 200:
        print(
            f"Initial test run failed - Please make sure benchmark arguments are correctly specified. "
            f"Error: cannot reach {base}",
            flush=True,
        )
        return 1
    _generate(base)
    r = RESULT
    print(f"#Input tokens: {args.num_prompts * args.random_input_len}")
    print(f"#Output tokens: {args.num_prompts * args.random_output_len}")
    print("\n{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    rows = [
        ("Backend:", args.backend),
        ("Traffic request rate:", "inf"),
        ("Max request concurrency:", args.max_concurrency),
        ("Successful requests:", args.num_prompts),
    ]
    for label, value in rows:
        print(f"{label:<40} {value:<10}")
    for label, value in (
        ("Benchmark duration (s):", 42.5),
        ("Request throughput (req/s):", 0.75),
        ("Input token throughput (tok/s):", 771.2),
        ("Output token throughput (tok/s):", r["output_throughput"]),
        ("Total token throughput (tok/s):", 853.13),
        ("Concurrency:", 1.0),
        ("Accept length:", r["accept_length"]),
    ):
        print(f"{label:<40} {value:<10.2f}")
    print("{s:{c}^{n}}".format(s="Time to First Token", n=50, c="-"))
    print("{:<40} {:<10.2f}".format("Mean TTFT (ms):", 101.2))
    print("{:<40} {:<10.2f}".format("Median TTFT (ms):", r["median_ttft_ms"]))
    print("{s:{c}^{n}}".format(s="Time per Output Token (excl. 1st token)", n=50, c="-"))
    print("{:<40} {:<10.2f}".format("Mean TPOT (ms):", 12.6))
    print("{:<40} {:<10.2f}".format("Median TPOT (ms):", r["median_tpot_ms"]))
    print("{s:{c}^{n}}".format(s="Inter-Token Latency", n=50, c="-"))
    print("{:<40} {:<10.2f}".format("Mean ITL (ms):", 12.3))
    print("{:<40} {:<10.2f}".format("Median ITL (ms):", r["median_itl_ms"]))
    print("=" * 50, flush=True)
    if args.output_file:
        record = {
            "backend": args.backend,
            "dataset_name": args.dataset_name,
            "completed": args.num_prompts,
            "max_concurrency": args.max_concurrency,
            **r,
        }
        with open(args.output_file, "a") as fh:
            fh.write(json.dumps(record) + "\n")
    return 0


def bench_one_batch_server(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench_one_batch_server.py")
    for flag in ("--model-path", "--base-url", "--result-filename"):
        parser.add_argument(flag)
    for flag in ("--batch-size", "--input-len", "--output-len"):
        parser.add_argument(flag, type=int)
    args = parser.parse_args(argv)
    if _get(args.base_url + "/health") != 200:
        print(f"cannot reach {args.base_url}", flush=True)
        return 1
    _generate(args.base_url)
    acc = float(os.environ.get("SGLANG_STANDIN_ACC_LENGTH", "-1"))
    print(
        f"batch size: {args.batch_size}\nlatency: 0.21 s\noutput throughput: 76.40 token/s\n"
        f"(input + output) throughput: 4963.2 token/s\nacc_length: {acc:.2f}",
        flush=True,
    )
    record = {
        "run_name": "default",
        "batch_size": args.batch_size,
        "input_len": args.input_len,
        "output_len": args.output_len,
        "latency": 0.21,
        "ttft": 0.05,
        "input_throughput": 20480.0,
        "output_throughput": 76.4,
        "acc_length": acc,
    }
    with open(args.result_filename, "a") as fh:
        fh.write(json.dumps(record) + "\n")
    return 0


# --- preflight probes (runners/preflight/probes.py), as a node of $SGLANG_STANDIN_NODE answers them ---
NODES = {
    # name: (GPU name, SM, GPU count, free GiB per GPU)
    "h200": ("NVIDIA H200", "9.0", 8, 139.0),
    "rtxpro6000-torch210": ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0", 8, 94.5),
}


def preflight_probe(argv: list[str]) -> int:
    node = os.environ.get("SGLANG_STANDIN_NODE", "h200")
    name, rest = (argv[0], argv[1:]) if argv else ("", [])
    if node == "cpu" or name not in ("flags", "gpus", "symm_mem", "graph_collective", "jit_target"):
        import runpy  # no GPU here: the real probe runs and says so

        sys.argv = ["runners.preflight.probes", *argv]
        try:
            runpy.run_module("runners.preflight.probes", run_name="__main__")
        except SystemExit as exc:
            return int(exc.code or 0)
        return 0
    gpu, sm, count, free_gib = NODES[node]
    major = sm.split(".")[0]
    if name == "flags":
        server_parser().parse_args(rest[1:] if rest[:1] == ["--"] else rest)
        print(f"sglang {VERSION} accepts: {' '.join(rest)}")
        return 0
    if name == "gpus":
        print(
            json.dumps(
                {
                    "gpus": [
                        {
                            "index": i,
                            "name": gpu,
                            "sm": sm,
                            "free_bytes": int(free_gib * 2**30),
                            "total_bytes": int((free_gib + 0.5) * 2**30),
                        }
                        for i in range(count)
                    ]
                }
            )
        )
        return 0
    if name == "symm_mem" and node == "rtxpro6000-torch210":
        # What the real probe prints there: sglang's per-SM table has no SM 12 (torch 2.10.0+cu128).
        print(
            "Traceback (most recent call last):\n"
            '  File "/work/runners/preflight/probes.py", line 79, in _symm_mem_rank\n'
            "    max_size = sizes[major][world_size]  # raises KeyError: <major> where sglang lacks the SM\n"
            "               ~~~~~^^^^^^^\n"
            "KeyError: 12\n"
            "preflight probe: rank exit codes [1, 1]",
            flush=True,
        )
        return 1
    if name == "jit_target" and node == "rtxpro6000-torch210":
        print(
            "GPU SM 12.0; torch 2.10.0+cu128 (CUDA 12.8) arch list: sm_80 sm_86 sm_90 sm_100 sm_120\n"
            "$ /usr/local/cuda-12.8/bin/nvcc -gencode=arch=compute_120a,code=sm_120a -c /tmp/probe.cu -o /tmp/probe.o\n"
            "nvcc fatal   : Unsupported gpu architecture 'compute_120a'",
            flush=True,
        )
        return 1
    print(
        {
            "symm_mem": f"symm_mem rendezvous + one_shot_all_reduce ok on 2 ranks, SM {major}",
            "graph_collective": "CUDA graph capture + replay of one NCCL all_reduce ok on 2 ranks",
            "jit_target": f"nvcc builds for compute_{sm.replace('.', '')}a",
        }[name],
        flush=True,
    )
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["-c"] and len(argv) > 1 and "sglang" in argv[1]:
        if os.environ.get("SGLANG_STANDIN_MODE") == "not_installed":
            print(
                'Traceback (most recent call last):\n  File "<string>", line 1, in <module>\n'
                "ModuleNotFoundError: No module named 'sglang'",
                file=sys.stderr,
            )
            return 1
        print(VERSION)
        return 0
    if argv[:1] == ["-m"] and len(argv) > 1:
        modules = {
            "sglang.launch_server": launch_server,
            "sglang.bench_serving": bench_serving,
            "sglang.bench_one_batch_server": bench_one_batch_server,
        }
        if argv[1] in modules:
            return modules[argv[1]](argv[2:])
        if argv[1] == "runners.preflight.probes":
            return preflight_probe(argv[2:])
    print(f"sglang_standin: unsupported invocation {argv!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
