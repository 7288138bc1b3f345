#!/usr/bin/env bash
# The GPU preflight probes on a real node (2x H200, torch, no sglang needed), each under a timeout.
#   OUT=/tmp/out bench/preflight_gpu.sh          (the device tool sets $OUT)
# Writes $OUT/preflight_gpu.txt (every probe's output) and $OUT/preflight_gpu.json (exit code per probe).
# Under 3 minutes: each probe is bounded (timeout -k), and the whole script by the sum.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-/tmp/preflight_gpu}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
log="$OUT/preflight_gpu.txt"
: > "$log"
declare -A rc
run() {  # name timeout_s args...
  local name=$1 limit=$2; shift 2
  echo "=== $name (limit ${limit}s): $PY -m runners.preflight.probes $*" | tee -a "$log"
  local start=$SECONDS
  timeout -k 5 "$limit" "$PY" -m runners.preflight.probes "$@" 2>&1 | tee -a "$log"
  rc[$name]=${PIPESTATUS[0]}
  echo "=== $name: exit ${rc[$name]} in $((SECONDS - start))s" | tee -a "$log"
}
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())' 2>&1 | tee -a "$log"
nvidia-smi --query-gpu=index,name,compute_cap,memory.free --format=csv 2>&1 | tee -a "$log"
run gpus 60 gpus
run symm_mem 60 symm_mem --world-size 2
run graph_collective 60 graph_collective --world-size 2
# The same graph check with an NCCL setting the seed found incompatible with graphs, for contrast.
NCCL_ALGO=Tree run graph_collective_tree 60 graph_collective --world-size 2
printf '{"gpus": %s, "symm_mem": %s, "graph_collective": %s, "graph_collective_nccl_tree": %s}\n' \
  "${rc[gpus]}" "${rc[symm_mem]}" "${rc[graph_collective]}" "${rc[graph_collective_tree]}" > "$OUT/preflight_gpu.json"
cat "$OUT/preflight_gpu.json"
[ "${rc[symm_mem]}" = 0 ] && [ "${rc[graph_collective]}" = 0 ]
