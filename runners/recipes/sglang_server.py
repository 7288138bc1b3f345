"""Launch an SGLang server for an approach, wait until it is ready, benchmark it, tear it down.

    python -m runners.recipes.sglang_server --model-path /models/Kimi-K2.5 --tp-size 8 \
        --server-arg=--enable-torch-symm-mem --speculative-algorithm EAGLE3 \
        --speculative-draft-model-path /models/eagle3 --sglang-python /envs/sglang/bin/python

Phases (each announced as a `@@campaign-phase <name>` line): version, preflight, launching,
waiting for ready, benchmarking, tearing down. Preflight (runners/preflight/) checks the node in
seconds before any weights load; a failing check ends the trial (exit 4) with its verdict proposal. The server runs in its own process group; teardown sends
SIGTERM to the group, waits `--teardown-grace-s`, then SIGKILL, and checks the GPUs are free
(nvidia-smi, when present). Every flag, path and value is one argv element, never a shell string.

Exit codes: 0 benchmarked; 1 the server exited during startup, or the benchmark failed;
2 bad parameters; 3 the server was not ready in time (READY_TIMEOUT_MESSAGE); 4 a preflight check failed.
Standard library only (it runs with the runner's python; sglang lives in `--sglang-python`).
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from app.protocol.metrics import ConditionTag, emit, emit_phase
from app.protocol.metrics import MetricName as M
from app.protocol.recipes import RecipeError
from app.protocol.sglang_output import (
    READY_LINE,
    UNITS,
    accept_length_from_server_info,
    parse_bench_stdout,
    parse_decode_line,
    parse_result_json,
)
from runners.preflight import Context, check_names, run_checks
from runners.recipes import SAFE_ENV, Recipe, module_argv
from runners.recipes._params import Param, cli_values
from runners.recipes._params import validate as _validate
from runners.recipes._sglang_launch import run_merged, server_argv

PROG = "runners.recipes.sglang_server"
# The wording app/domain/signatures.py matches (its READINESS_TIMEOUT_RE); keep them together.
READY_TIMEOUT_MESSAGE = (
    "sglang_server: server not ready within {timeout:g}s: no '{ready_line}' line and GET /health never returned 200"
)
# Appended when the server printed anything: how long it had been quiet (a stall vs a slow load).
READY_TIMEOUT_IDLE = "; its last line came {idle:.0f}s before"
STARTUP_EXIT_MESSAGE = "sglang_server: server exited during startup with code {code}; its last {n} lines:"
TAIL_LINES = 30
EXIT_STARTUP, EXIT_USAGE, EXIT_NOT_READY, EXIT_PREFLIGHT = 1, 2, 3, 4
BENCH_TOOLS = ("bench_serving", "bench_one_batch_server", "none")

SPEC = (
    Param("model_path", "str", None, "target model path or hub id", required=True),
    Param("tp_size", "int", 1, "tensor parallel size", minimum=1),
    Param("server_args", "str_list", [], "one argv element for launch_server (repeat; use --server-arg=--flag)"),
    Param("speculative_algorithm", "str", None, "e.g. EAGLE3"),
    Param("speculative_draft_model_path", "str", None, "draft model path"),
    Param("speculative_num_steps", "int", None, "draft steps (unset: sglang chooses)", minimum=1),
    Param("speculative_eagle_topk", "int", None, "EAGLE top-k (unset: sglang chooses)", minimum=1),
    Param("speculative_num_draft_tokens", "int", None, "draft tokens verified (unset: sglang chooses)", minimum=1),
    Param("host", "str", "127.0.0.1", "server host"),
    Param("port", "int", 30000, "server port", minimum=1),
    Param("sglang_python", "str", "python3", "the interpreter that has sglang installed"),
    Param("ready_timeout_s", "float", 1800.0, "give up waiting for readiness after this", minimum=1),
    Param("teardown_grace_s", "float", 30.0, "SIGTERM to SIGKILL grace for the server's group", minimum=0),
    Param("bench_tool", "choice", "bench_serving", "benchmark to run once ready", choices=BENCH_TOOLS),
    Param("num_prompts", "int", 32, "bench_serving --num-prompts", minimum=1),
    Param("input_len", "int", 1024, "input tokens per request", minimum=1),
    Param("output_len", "int", 256, "output tokens per request", minimum=1),
    Param("max_concurrency", "int", 1, "bench_serving --max-concurrency", minimum=1),
    Param("batch_size", "int", 1, "bench_one_batch_server --batch-size", minimum=1),
    Param("bench_args", "str_list", [], "extra argv elements for the benchmark (use --bench-arg=--flag)"),
    Param("bench_timeout_s", "float", 3600.0, "give up on the benchmark after this", minimum=1),
    Param("result_file", "str", None, "benchmark result file (default: a new temporary file)"),
    Param("preflight", "choice", "on", "run the preflight checks before launching", choices=("on", "off")),
    Param("preflight_skip", "str_list", [], "a preflight check to skip (repeat)"),
    Param("preflight_timeout_s", "float", 120.0, "limit for each preflight probe", minimum=1),
    Param("only_preflight", "choice", "off", "run the preflight checks, then stop", choices=("on", "off")),
)
# CLI flag spellings for the list params (singular reads better when repeated).
_CLI_RENAMES = {"server_args": "--server-arg", "bench_args": "--bench-arg", "preflight_skip": "--preflight-skip"}

# The nested recipe shape -> flat parameter names.
_NESTED = {
    "speculative": {
        "algorithm": "speculative_algorithm",
        "draft_model_path": "speculative_draft_model_path",
        "num_steps": "speculative_num_steps",
        "eagle_topk": "speculative_eagle_topk",
        "num_draft_tokens": "speculative_num_draft_tokens",
    },
    "bench": {
        "tool": "bench_tool",
        "num_prompts": "num_prompts",
        "input_len": "input_len",
        "output_len": "output_len",
        "max_concurrency": "max_concurrency",
        "batch_size": "batch_size",
        "extra_args": "bench_args",
        "timeout_s": "bench_timeout_s",
        "result_file": "result_file",
    },
    "preflight": {"enabled": "preflight", "skip": "preflight_skip", "timeout_s": "preflight_timeout_s"},
}


def flatten(params: dict[str, Any]) -> dict[str, Any]:
    """Recipe params ({"flags": [...], "speculative": {...}, "bench": {...}}) -> flat parameter names."""
    if not isinstance(params, dict):
        raise RecipeError("params: must be a mapping")
    flat: dict[str, Any] = {}
    for key, value in params.items():
        if key == "flags":
            flat["server_args"] = value
        elif key in _NESTED:
            if value is None:
                continue
            if not isinstance(value, dict):
                raise RecipeError(f"params.{key}: must be a mapping")
            for sub, sub_value in value.items():
                if sub not in _NESTED[key]:
                    raise RecipeError(f"params.{key}.{sub}: unknown key; expected one of {', '.join(_NESTED[key])}")
                flat[_NESTED[key][sub]] = sub_value
        else:
            flat[key] = value
    return flat


def validate(params: dict[str, Any]) -> dict[str, Any]:
    """Validate flat params (the CLI's names). Raises RecipeError naming the parameter."""
    values = _validate(params, SPEC)
    for name in ("server_args", "bench_args"):
        for item in values[name]:
            if "\n" in item or "\x00" in item:
                raise RecipeError(f"params.{name}: argv elements cannot contain newlines or NUL: {item!r}")
    if values["preflight_skip"]:
        unknown = sorted(set(values["preflight_skip"]) - set(check_names()))
        if unknown:
            raise RecipeError(
                f"params.preflight.skip: unknown check(s) {', '.join(unknown)}; "
                f"expected some of {', '.join(check_names())}"
            )
    if values["speculative_draft_model_path"] and not values["speculative_algorithm"]:
        raise RecipeError(
            "params.speculative.algorithm (--speculative-algorithm): required when a draft model is given"
        )
    return values


def cli_argv(values: dict[str, Any]) -> list[str]:
    """CLI flags reproducing validated values (what build_launch passes)."""
    argv: list[str] = []
    for param in SPEC:
        value = values.get(param.name)
        if value is None:
            continue
        flag = _CLI_RENAMES.get(param.name, param.flag)
        if isinstance(value, list):
            argv.extend(f"{flag}={item}" for item in value)
        else:
            argv.append(f"{flag}={value}")
    return argv


# The recipe contract: JSON params are nested ({"flags", "speculative", "bench"}), the CLI flat.
RECIPE = Recipe(
    spec=SPEC,
    validate=lambda params: validate(flatten(params)),
    argv=lambda values, python: module_argv(python, PROG, cli_argv(values)),
    safe_env=True,
)


def _flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The last value given to `flag` in argv (`--flag V` or `--flag=V`), as launch_server's argparse reads it."""
    found = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
    return found


def speculative_tags(argv: Sequence[str]) -> dict[str, int]:
    """The draft length k and EAGLE top-k a speculative server was launched with, read from its launch flags
    (so accept lengths file under the k they were measured at). k is `--speculative-num-draft-tokens` - 1 for a
    chain (top-k 1: the verify window is k + 1), else the draft depth `--speculative-num-steps`. A value the
    flags leave to sglang (auto-chosen) is not tagged: the trial's k is then not known from its launch line."""

    def number(flag: str) -> int | None:
        text = _flag_value(argv, flag)
        return int(text) if text is not None and text.strip().isdigit() else None

    steps, topk = number("--speculative-num-steps"), number("--speculative-eagle-topk")
    draft_tokens = number("--speculative-num-draft-tokens")
    tags: dict[str, int] = {}
    if topk is not None:
        tags[ConditionTag.TOPK] = topk
    if topk == 1 and draft_tokens is not None:
        tags[ConditionTag.DRAFT_TOKENS] = draft_tokens - 1
    elif steps is not None:
        tags[ConditionTag.DRAFT_TOKENS] = steps
    return tags


def bench_argv(values: dict[str, Any], result_file: str) -> list[str]:
    """The benchmark's command: sglang.bench_serving (random prompts at a concurrency) or
    sglang.bench_one_batch_server (one batch), each flag and value its own element, then bench_args."""
    host, port = values["host"], values["port"]
    if values["bench_tool"] == "bench_serving":
        module = "sglang.bench_serving"
        flags = {
            "--backend": "sglang",
            "--host": host,
            "--port": port,
            "--dataset-name": "random-ids",
            "--num-prompts": values["num_prompts"],
            "--random-input-len": values["input_len"],
            "--random-output-len": values["output_len"],
            "--max-concurrency": values["max_concurrency"],
            "--output-file": result_file,
        }
    else:
        module = "sglang.bench_one_batch_server"
        flags = {
            "--model-path": values["model_path"],
            "--base-url": f"http://{host}:{port}",
            "--batch-size": values["batch_size"],
            "--input-len": values["input_len"],
            "--output-len": values["output_len"],
            "--result-filename": result_file,
        }
    pairs = [text for flag, value in flags.items() for text in (flag, str(value))]
    return [values["sglang_python"], "-m", module, *pairs, *values["bench_args"]]


# --- parsing SGLang's outputs: app/protocol/sglang_output.py --------------------------------


# --- running ---------------------------------------------------------------------------------


def phase(name: str) -> None:
    emit_phase(name)


class Server:
    """The launched server: its process group, a thread streaming its log, readiness and decode stats
    (and the lines `keep` finds: vllm_server launches its engines through this class too)."""

    def __init__(self, argv: list[str], env: dict[str, str], keep: re.Pattern[str] | None = None):
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            errors="replace",
            env=env,
            start_new_session=True,
        )
        self.pgid = self.proc.pid  # start_new_session: the server leads its own group
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.ready_line_seen = threading.Event()
        self.decode: list[tuple[float, float]] = []
        self.keep = keep
        self.kept: list[str] = []  # every line `keep` finds (vllm_server: the SpecDecoding lines), in order
        self.lines = 0
        self.last_line_at: float | None = None
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, ""):
            sys.stdout.write(line)
            sys.stdout.flush()
            self.tail.append(line.rstrip("\n"))
            self.lines += 1
            self.last_line_at = time.monotonic()
            if READY_LINE in line:
                self.ready_line_seen.set()
            if self.keep is not None and self.keep.search(line):
                self.kept.append(line.rstrip("\n"))
            stats = parse_decode_line(line)
            if stats:
                self.decode.append(stats)

    def drain(self, timeout: float = 5.0) -> None:
        self._reader.join(timeout)

    def settle(self, quiet_s: float = 0.3, limit_s: float = 3.0) -> None:
        """Let the log reader catch up with lines printed just now (until quiet_s passes without one)."""
        deadline = time.monotonic() + limit_s
        seen = -1
        while seen != self.lines and time.monotonic() < deadline:
            seen = self.lines
            time.sleep(quiet_s)

    def stop(self, grace_s: float) -> str:
        """SIGTERM the group, wait, SIGKILL the group. Says what it took."""
        how = "already exited"
        try:
            os.killpg(self.pgid, signal.SIGTERM)
            how = "SIGTERM"
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.monotonic() + grace_s
        while group_alive(self.pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if group_alive(self.pgid):
            try:
                os.killpg(self.pgid, signal.SIGKILL)
                how = "SIGKILL after SIGTERM grace"
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + 5
            while group_alive(self.pgid) and time.monotonic() < deadline:
                time.sleep(0.05)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        self.drain(2.0)
        return how


def group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process remains in the group.

    A killed process whose new parent has not reaped it yet (containers' PID 1 often does not)
    still answers kill(0); on Linux /proc tells the zombie apart.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not os.path.isdir("/proc/self"):
        return True
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read() if exc.fp else b""
    except (urllib.error.URLError, OSError):
        return 0, b""


def sglang_version(python: str, env: dict[str, str]) -> str | None:
    return version_line("sglang_server", python, "sglang", "import sglang; print(sglang.__version__)", env, 180)


def version_line(who: str, python: str, what: str, code: str, env: dict[str, str], timeout_s: float) -> str | None:
    """The last line `code` prints under the node's `python` (an engine's version), or None with the reason
    printed (it cannot run, or fails: its output is passed on)."""
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=timeout_s, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"{who}: cannot run {python!r} to read the {what} version: {exc}", flush=True)
        return None
    if done.returncode != 0:
        sys.stdout.write(done.stdout + done.stderr)
        sys.stdout.flush()
        return None
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else None


def wait_ready(server: Server, base_url: str, timeout_s: float) -> str:
    """'ready', 'exited' or 'timeout'. Ready = the ready log line, or GET /health 200."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.ready_line_seen.is_set():
            return "ready"
        if server.proc.poll() is not None:
            server.drain()
            return "ready" if server.ready_line_seen.is_set() else "exited"
        status, _ = http_get(base_url + "/health", timeout=2.0)
        if status == 200:
            return "ready"
        server.ready_line_seen.wait(0.5)
    return "timeout"


def server_info(base_url: str) -> Any:
    for path in ("/server_info", "/get_server_info"):
        status, body = http_get(base_url + path)
        if status == 200:
            try:
                return json.loads(body)
            except ValueError:
                return None
    return None


def gpu_release_check() -> None:
    smi = shutil.which("nvidia-smi")
    if not smi:
        print("sglang_server: GPU release not checked (no nvidia-smi on this node)", flush=True)
        return
    try:
        done = subprocess.run(
            [smi, "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"sglang_server: GPU release not checked (nvidia-smi failed: {exc})", flush=True)
        return
    apps = [ln for ln in done.stdout.splitlines() if ln.strip()]
    if done.returncode != 0:
        print(f"sglang_server: GPU release not checked (nvidia-smi exit {done.returncode})", flush=True)
    elif apps:
        print(
            f"sglang_server: GPUs NOT released: {len(apps)} compute process(es) remain: {'; '.join(apps)}", flush=True
        )
    else:
        print("sglang_server: GPUs released (no compute processes)", flush=True)
    if done.returncode == 0:
        emit(M.GPU_PROCESSES_AFTER_TEARDOWN, len(apps), "")


class _Terminated(Exception):
    pass


def run(values: dict[str, Any]) -> int:
    env = dict(os.environ)
    for key, value in SAFE_ENV.items():
        env.setdefault(key, value)
    base_url = f"http://{values['host']}:{values['port']}"

    # While the server is being launched a SIGTERM is held, not raised: raised between its spawn (in its own
    # session, out of reach of the trial's process group) and the `try` that tears it down, it would leave
    # the server running. It is raised as soon as that `try` holds the server.
    held: list[int] = []
    holding = [False]

    def on_term(signum: int, _frame: Any) -> None:
        if holding[0]:
            held.append(signum)
            return
        raise _Terminated(signum)

    signal.signal(signal.SIGTERM, on_term)
    phase("version")
    version = sglang_version(values["sglang_python"], env)
    print(f"sglang_server: sglang version {version or 'unknown'}", flush=True)
    tags: dict[str, Any] = {
        "sglang_version": version or "unknown",
        "tp_size": values["tp_size"],
        "bench_tool": values["bench_tool"],
    }
    if values["speculative_algorithm"]:
        tags["speculative_algorithm"] = values["speculative_algorithm"]

    if values["preflight"] == "on" or values["only_preflight"] == "on":
        if not _preflight(values, env, version, tags):
            return EXIT_PREFLIGHT
    if values["only_preflight"] == "on":
        return 0

    phase("launching")
    argv = server_argv(values)
    tags.update(_speculation_tags(values, argv))
    print("sglang_server: launching " + json.dumps(argv), flush=True)
    holding[0] = True
    try:
        server = Server(argv, env)
    except OSError as exc:
        holding[0] = False
        print(f"sglang_server: cannot start {argv[0]!r}: {exc}", flush=True)
        return EXIT_STARTUP
    print(f"sglang_server: server pid {server.proc.pid}, process group {server.pgid}", flush=True)
    try:
        holding[0] = False
        if held:
            raise _Terminated(held[0])
        phase("waiting for ready")
        started = time.monotonic()
        not_ready = _not_ready(server, wait_ready(server, base_url, values["ready_timeout_s"]), values)
        if not_ready is not None:
            return not_ready
        emit(M.SERVER_READY_S, time.monotonic() - started, "s", **tags)
        if values["bench_tool"] == "none":
            return 0
        phase("benchmarking")
        return _benchmark(values, server, base_url, env, tags)
    except _Terminated:
        print("sglang_server: terminated; tearing the server down", flush=True)
        return 143
    finally:
        phase("tearing down")
        how = server.stop(values["teardown_grace_s"])
        alive = group_alive(server.pgid)
        print(
            f"sglang_server: server process group {server.pgid} {'STILL ALIVE' if alive else 'stopped'} ({how})",
            flush=True,
        )
        gpu_release_check()


def _preflight(values: dict[str, Any], env: dict[str, str], version: str | None, tags: dict[str, Any]) -> bool:
    """The node's preflight checks, timed (a metric line); False when one failed (said: no launch)."""
    phase("preflight")
    started = time.monotonic()
    failed = run_checks(Context(values, env, version, values["preflight_timeout_s"]), skip=values["preflight_skip"])
    emit(M.PREFLIGHT_S, time.monotonic() - started, "s", passed=failed is None, **tags)
    if failed is not None:
        print("sglang_server: preflight failed; the server was not launched", flush=True)
    return failed is None


def _speculation_tags(values: dict[str, Any], argv: list[str]) -> dict[str, Any]:
    """The speculation the server's argv asks for, as tags ({} without speculation); says when the draft
    length is left to sglang."""
    if not values["speculative_algorithm"]:
        return {}
    spec_tags = speculative_tags(argv)
    if ConditionTag.DRAFT_TOKENS not in spec_tags:
        print(
            "sglang_server: the draft length is left to sglang (no --speculative-num-steps or "
            "--speculative-num-draft-tokens): accept lengths are not tagged with draft_tokens",
            flush=True,
        )
    return spec_tags


def _not_ready(server: Server, state: str, values: dict[str, Any]) -> int | None:
    """The exit code (said, with the server's last lines) when the server exited or never got ready, else None."""
    if state == "exited":
        print(STARTUP_EXIT_MESSAGE.format(code=server.proc.returncode, n=len(server.tail)), flush=True)
        for line in server.tail:
            print("    " + line, flush=True)
        return EXIT_STARTUP
    if state == "timeout":
        idle = (
            READY_TIMEOUT_IDLE.format(idle=time.monotonic() - server.last_line_at)
            if server.last_line_at is not None
            else ""
        )
        print(READY_TIMEOUT_MESSAGE.format(timeout=values["ready_timeout_s"], ready_line=READY_LINE) + idle, flush=True)
        return EXIT_NOT_READY
    return None


def _benchmark(values: dict[str, Any], server: Server, base_url: str, env: dict[str, str], tags: dict[str, Any]) -> int:
    own_file = values["result_file"] is None
    result_file = values["result_file"] or tempfile.mkstemp(prefix="sglang-bench-", suffix=".jsonl")[1]
    try:
        argv = bench_argv(values, result_file)
        print("sglang_server: benchmark " + json.dumps(argv), flush=True)
        decode_before = len(server.decode)
        code, output = run_merged(argv, env=env, timeout_s=values["bench_timeout_s"])
        sys.stdout.write(output)
        sys.stdout.flush()
        if code is None:
            print(f"sglang_server: benchmark did not finish within {values['bench_timeout_s']:g}s", flush=True)
            return 1
        if code != 0:
            print(f"sglang_server: benchmark exited with code {code}", flush=True)
            return 1
        with open(result_file, encoding="utf-8", errors="replace") as fh:
            from_json = parse_result_json(fh.read())
        from_stdout = parse_bench_stdout(output)
        # The result file is the benchmark's own record; its printed summary fills gaps.
        for name in sorted(set(from_json) | set(from_stdout)):
            in_json = name in from_json
            source = "result_file" if in_json else "stdout"
            value = from_json[name] if in_json else from_stdout[name]
            emit(name, value, UNITS.get(name, ""), source=source, **tags)
        info = server_info(base_url)
        server.settle()
        accept = accept_length_from_server_info(info)
        if accept is not None:
            emit(M.SERVER_ACCEPT_LENGTH, accept, "", source="server_info", **tags)
        decode = server.decode[decode_before:] or server.decode
        if decode:
            emit(M.DECODE_LOG_ACCEPT_LEN, sum(a for a, _ in decode) / len(decode), "", lines=len(decode), **tags)
            emit(
                M.GEN_THROUGHPUT_LOG,
                sum(t for _, t in decode) / len(decode),
                "tok/s",
                lines=len(decode),
                **tags,
            )
        if not from_json and not from_stdout:
            print("sglang_server: benchmark finished but printed no recognizable results", flush=True)
            return 1
        return 0
    finally:
        if own_file:
            try:
                os.unlink(result_file)
            except OSError:
                pass


def main(argv: Sequence[str] | None = None) -> int:
    return run(cli_values(PROG, __doc__, SPEC, argv, validate, _CLI_RENAMES))


if __name__ == "__main__":
    sys.exit(main())
