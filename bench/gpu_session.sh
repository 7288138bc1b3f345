#!/usr/bin/env bash
# One GPU session on a 2x H200 node, from the repository root, in under 9 minutes:
#   (a) the allreduce shootout through a real server and its embedded runner
#       (bench/shootout_on_node.py: run next until done, verdicts confirmed, campaign + metrics exported);
#   (b) bench/harness_overhead.py: the recipe's method vs a bare loop's per-call-events and wall-clock.
#
#   OUT=/some/dir PYTHONPATH=/tmp/site bash bench/gpu_session.sh [all|shootout|harness|sweep]
#
# `sweep` (one GPU is enough): imports bench/campaigns/speculation-sweep-h200x1.yaml (or $SWEEP_FILE)
# into a real server and runs it through its runner like the shootout: T_base(b), verify compute over
# (batch, draft tokens) and the draft step over batch; $OUT gets the run's SQLite database too
# (campaign.db), so that `campaign export --with-results` can be run on it afterwards.
#
# `all` fits both in 9 minutes (the shootout then covers the candidates it reaches in 200 s, in
# priority order); `shootout` alone gives it 400 s; `harness` alone takes about 3 minutes.
#
# Results land in $OUT (at most 8 files, no folders): session.log, summary.json,
# allreduce-shootout.yaml, allreduce-shootout-metrics.csv, harness_overhead.json,
# harness_overhead.txt, and session.tar.gz (server log, node facts, everything else).
# Every step runs under `timeout`; multicast stays off in every process (exported below).
set -u
STEPS="${1:-all}"
: "${OUT:?set OUT to the results folder}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python3}"
# No trial starts after this: 200 s when the harness follows in the same 9 minutes, 400 s alone.
if [ "$STEPS" = shootout ]; then SHOOTOUT_DEADLINE_S="${SHOOTOUT_DEADLINE_S:-400}"; else SHOOTOUT_DEADLINE_S="${SHOOTOUT_DEADLINE_S:-200}"; fi
SHOOTOUT_SKIP="${SHOOTOUT_SKIP:-}"                     # approach keys to cancel at once (comma-separated)
TRIAL_DEADLINE_S="${TRIAL_DEADLINE_S:-80}"             # a trial running longer is cancelled
HARNESS_VARIANTS="${HARNESS_VARIANTS:-nccl:eager,nccl:graph,symm_mem_two_shot:eager,symm_mem_two_shot:graph}"
HARNESS_ROUNDS="${HARNESS_ROUNDS:-2}"
HARNESS_ARGS="${HARNESS_ARGS:-}"                     # e.g. --hidden 256 for a CPU dry run
WORK="$(mktemp -d /tmp/gpu-session.XXXXXX)"
mkdir -p "$OUT" "$WORK/files"
exec > >(tee -a "$OUT/session.log") 2>&1
step() { echo; echo "=== $(date -u +%H:%M:%S) $*"; }

step "node facts"
timeout 30 nvidia-smi > "$WORK/files/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed or absent"
timeout 30 nvidia-smi topo -m > "$WORK/files/nvidia-smi-topo.txt" 2>&1 || true
timeout 120 "$PY" - <<'EOF' || { echo "preflight failed: see above"; exit 3; }
import importlib, sys
import torch
nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "gpus", torch.cuda.device_count(), "nccl", nccl)
missing = []
for name in ("fastapi", "uvicorn", "sqlmodel", "alembic", "typer", "rich", "httpx", "websockets", "yaml", "psutil",
             "plotly", "jinja2_fragments", "itsdangerous", "pydantic_settings"):
    try:
        importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001
        missing.append(f"{name} ({exc})")
if missing:
    sys.exit("missing modules for the server: " + "; ".join(missing))
import app.main, app.cli, runners.agent, runners.recipes  # noqa: E401,F401 - the server and runner import
print("recipes:", ", ".join(sorted(runners.recipes.recipes())))
EOF

if [ "$STEPS" = all ] || [ "$STEPS" = shootout ]; then
  step "(a) shootout through a real server and runner (deadline ${SHOOTOUT_DEADLINE_S}s, ${TRIAL_DEADLINE_S}s per trial)"
  timeout -k 30 "$((SHOOTOUT_DEADLINE_S + TRIAL_DEADLINE_S + 30))" "$PY" bench/shootout_on_node.py \
    --campaign allreduce-shootout --out "$WORK/shootout" \
    --deadline-s "$SHOOTOUT_DEADLINE_S" --trial-deadline-s "$TRIAL_DEADLINE_S" --skip "$SHOOTOUT_SKIP"
  echo "shootout exit code $?"
  for f in summary.json allreduce-shootout.yaml allreduce-shootout-metrics.csv; do
    [ -f "$WORK/shootout/$f" ] && cp "$WORK/shootout/$f" "$OUT/$f"
  done
  [ -f "$WORK/shootout/server.log" ] && cp "$WORK/shootout/server.log" "$WORK/files/server.log"
fi

if [ "$STEPS" = sweep ]; then
  SWEEP_FILE="${SWEEP_FILE:-bench/campaigns/speculation-sweep-h200x1.yaml}"
  SWEEP_SLUG="$("$PY" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["campaign"]["slug"])' "$SWEEP_FILE")"
  SWEEP_DEADLINE_S="${SWEEP_DEADLINE_S:-420}"
  step "(c) sweep $SWEEP_SLUG through a real server and runner (deadline ${SWEEP_DEADLINE_S}s, ${TRIAL_DEADLINE_S}s per trial)"
  timeout -k 30 "$((SWEEP_DEADLINE_S + TRIAL_DEADLINE_S + 60))" "$PY" bench/shootout_on_node.py \
    --campaign "$SWEEP_SLUG" --import "$SWEEP_FILE" --out "$WORK/sweep" \
    --deadline-s "$SWEEP_DEADLINE_S" --trial-deadline-s "$TRIAL_DEADLINE_S" --skip "$SHOOTOUT_SKIP"
  echo "sweep exit code $?"
  for f in summary.json "$SWEEP_SLUG.yaml" "$SWEEP_SLUG-metrics.csv"; do
    [ -f "$WORK/sweep/$f" ] && cp "$WORK/sweep/$f" "$OUT/$f"
  done
  for db in "$WORK"/sweep/data/*.db; do [ -f "$db" ] && cp "$db" "$OUT/campaign.db"; done
  if [ -d "$WORK/sweep/data/artifacts/objects" ]; then  # profiled trials left traces: their kernel tables
    timeout 300 "$PY" bench/kernel_tables.py --data-dir "$WORK/sweep/data" --json "$OUT/kernels.json" \
      | tee "$OUT/kernels.md"
  fi
  [ -f "$WORK/sweep/server.log" ] && cp "$WORK/sweep/server.log" "$WORK/files/server.log"
fi

if [ "$STEPS" = all ] || [ "$STEPS" = harness ]; then
  step "(b) harness overhead: recipe vs bare per-call-events and wall-clock ($HARNESS_VARIANTS, $HARNESS_ROUNDS rounds)"
  timeout -k 10 "${HARNESS_TIMEOUT_S:-180}" "$PY" bench/harness_overhead.py $HARNESS_ARGS --variants "$HARNESS_VARIANTS" --tokens 1,4,8,64 \
    --rounds "$HARNESS_ROUNDS" --warmup-rounds 0 --timeout-s 60 --out "$OUT/harness_overhead.json" \
    2>&1 | tee "$OUT/harness_overhead.txt"
  echo "harness overhead exit code ${PIPESTATUS[0]}"
fi

step "packing"
tar -czf "$OUT/session.tar.gz" -C "$WORK/files" . && rm -rf "$WORK"
ls -la "$OUT"
step "done"
