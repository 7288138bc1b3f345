#!/usr/bin/env bash
# The MoE stand-in on ONE GPU (issues 35, 44), recipes run directly, each trial one process under `timeout`:
#   OUT=dir bash bench/moe_gpu_session.sh [kernels|smoke|sweep|all|int4] [RUN]
# kernels: bench/moe_kernels.py (one MoE layer's experts per kernel and dtype against its memory floor), then
# smoke. smoke: the float32 checks at batch 1 and 16, k 0 and 3 (bf16, fp8, int4 group 32 experts with the
# grouped kernels; int4 with the per-expert loop; the router's own routing). sweep: moe_step over batch 1-128
# x k 0-7 at contexts 1,024 and 4,096 with int4, bf16 and fp8 experts (balanced routing, grouped kernels),
# and the draft step (TP 1, draft vocab 32,000 and 163,840) over batch 1-128, all in CUDA graphs.
# Every trial's log goes to $OUT/logs-RUN.tar.gz (refreshed after each trial, so a stop keeps what ran);
# bench/moe_results.py turns the logs into a results campaign (trials with their metric lines).
set -u
STEPS="${1:-all}"; RUN="${2:-1}"
: "${OUT:?set OUT to the results folder}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
ROOT="$(cd "$(dirname "$0")/.." && pwd)"; cd "$ROOT"; export PYTHONPATH="$ROOT"
PY="${PYTHON:-python3}"
LOGS="$(mktemp -d /tmp/moe-logs.XXXXXX)"
exec > >(tee -a "$OUT/session-$RUN.log") 2>&1
BATCHES=1,2,4,8,16,32,64,128; KS=0,1,2,3,4,5,6,7
trial() {  # trial NAME TIMEOUT_S module args...
  local name="$1" limit="$2"; shift 2
  echo "=== $(date -u +%H:%M:%S) trial $name: $*"
  { echo "# argv: $*"; echo "# started: $(date -u +%FT%T)"; } > "$LOGS/$name.log"
  timeout -k 10 "$limit" "$PY" -m "$@" >> "$LOGS/$name.log" 2>&1
  local rc=$?
  echo "# exit_code: $rc" >> "$LOGS/$name.log"; echo "# finished: $(date -u +%FT%T)" >> "$LOGS/$name.log"
  grep -v '^@@campaign' "$LOGS/$name.log" | tail -14
  echo "--- $name exit $rc"
  tar -czf "$OUT/logs-$RUN.tar.gz" -C "$LOGS" .
  return $rc
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$LOGS/node.txt" 2>&1
"$PY" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())), "sm", torch.cuda.get_device_capability())' >> "$LOGS/node.txt" 2>&1
cat "$LOGS/node.txt"
MOE="runners.recipes.moe_step --backend nccl --world-size 1 --mode graph --warmup 2"
if [ "$STEPS" = kernels ] || [ "$STEPS" = all ]; then  # one MoE layer's experts per kernel and dtype (issue 44)
  echo "=== $(date -u +%H:%M:%S) bench/moe_kernels.py"
  timeout -k 10 240 "$PY" bench/moe_kernels.py 2>&1 | tee "$OUT/kernels-$RUN.txt"
fi
if [ "$STEPS" = smoke ] || [ "$STEPS" = all ] || [ "$STEPS" = kernels ]; then
  for edt in bf16 fp8 int4; do
    trial "smoke-moe-$edt" 150 $MOE --batches 1,16 --draft-tokens 0,3 --iters 5 --experts-dtype $edt
  done
  trial smoke-moe-int4-loop 150 $MOE --batches 1,16 --draft-tokens 0,3 --iters 5 --experts-dtype int4 --experts-kernel loop
  trial smoke-moe-bf16-router 150 $MOE --batches 1,16 --draft-tokens 0,3 --iters 5 --experts-dtype bf16 --routing router
fi
if [ "$STEPS" = sweep ] || [ "$STEPS" = all ]; then
  for ctx in 1024 4096; do for edt in int4 bf16 fp8; do
    trial "moe-$edt-ctx$ctx" 150 $MOE --batches $BATCHES --draft-tokens $KS --context $ctx --iters 20 --experts-dtype $edt
  done; done
  for dv in 32000 163840; do
    trial "draft-v$dv" 120 runners.recipes.draft_step --device cuda --mode graph --batches $BATCHES --draft-vocab $dv --iters 20
  done
fi
if [ "$STEPS" = int4 ]; then  # the int4 sweep alone (a rerun after a kernel fix), with bf16 at 1,024 as the card's baseline
  for ctx in 1024 4096; do
    trial "moe-int4-ctx$ctx" 150 $MOE --batches $BATCHES --draft-tokens $KS --context $ctx --iters 20 --experts-dtype int4
  done
  trial "moe-bf16-ctx1024" 150 $MOE --batches $BATCHES --draft-tokens $KS --context 1024 --iters 20 --experts-dtype bf16
fi
echo "=== $(date -u +%H:%M:%S) done"; ls -la "$OUT"
