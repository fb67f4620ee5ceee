#!/usr/bin/env bash
# The GPU check in one call (<= 8 min on one GPU): the GPU model, `pytest -m cuda`, the M3G bench
# (fwd+bwd, float32, eps 0.2, tol 1e-3, fresh embeddings each call; ott-jax when a CUDA jax imports), the EEG
# demo's training steps/s, MVEB and contrastive peak memory at n*k = 131,072. Each part runs under its own
# `timeout`, so one slow part cannot eat the others' time; a part that fails or times out is named at the end
# (exit status 1) and the later parts still run.
#
#   bash scripts/gpu_check.sh [--out DIR]        # on a GPU; DIR defaults to $OUT (the device tool's folder)
#                                                # or runs/gpu_check
#   bash scripts/gpu_check.sh --cpu-smoke [--out DIR]   # the same parts at tiny sizes on the CPU (< 1 min)
#
# Writes DIR/summary.md (GPU model, each part's status and seconds) and DIR/<part>.log (each part's full
# output; the bench parts also DIR/<part>/bench_gpu.md). Python: $PYTHON, else .venv/bin/python, else python3.
set -euo pipefail

cd "$(dirname "$0")/.."
SMOKE=0
DEST="${OUT:-runs/gpu_check}"
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu-smoke) SMOKE=1 ;;
    --out) DEST="${2:?--out needs a folder}"; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (expected --cpu-smoke, --out DIR)" >&2; exit 2 ;;
  esac
  shift
done
if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"
elif [ -x .venv/bin/python ]; then PY=.venv/bin/python
else PY=python3
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export XLA_PYTHON_CLIENT_PREALLOCATE=false
mkdir -p "$DEST"
SUMMARY="$DEST/summary.md"
BENCH=(scripts/bench/bench_gpu.py)
if [ "$SMOKE" = 1 ]; then
  MODE="CPU smoke (tiny sizes; no GPU numbers)"
  PYTEST_ARGS=(tests/test_cuda.py)   # -m cuda on the CPU: every test skips with its reason
  BENCH_ARGS=(--device cpu --quick --threads 1)
  M3G_ARGS=(--sizes 8:3 --repeats 2 --no-ott)
  LIMIT_MODEL=60; LIMIT_PYTEST=90; LIMIT_M3G=120; LIMIT_TRAIN=120; LIMIT_MEMORY=90  # generous: a busy CI machine
else
  MODE="GPU"
  PYTEST_ARGS=(tests)
  BENCH_ARGS=(--device cuda)
  M3G_ARGS=(--sizes 16:6,32:3,64:3,64:4,128:4 --repeats 5)
  LIMIT_MODEL=30; LIMIT_PYTEST=100; LIMIT_M3G=180; LIMIT_TRAIN=80; LIMIT_MEMORY=60
fi

FAILED=()
START=$SECONDS
{ echo "# gpu_check.sh: $MODE"; echo; echo "| part | status | seconds | time limit s |"; echo "|---|---|---|---|"; } > "$SUMMARY"

# part NAME LIMIT_S COMMAND...: run COMMAND under `timeout`, its output to DEST/NAME.log and the console
part() {
  local name="$1" limit="$2" status t0=$SECONDS rc
  shift 2
  echo "== $name (time limit ${limit} s): $*"
  set +o errexit
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$DEST/$name.log"
  rc=${PIPESTATUS[0]}
  set -o errexit
  case "$rc" in
    0) status="ok" ;;
    124|137) status="timed out"; FAILED+=("$name") ;;
    *) status="failed (exit $rc)"; FAILED+=("$name") ;;
  esac
  echo "| $name | $status | $((SECONDS - t0)) | $limit |" >> "$SUMMARY"
  echo "== $name: $status in $((SECONDS - t0)) s"
}

gpu_model() {
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  else
    echo "nvidia-smi: not found"
  fi
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "|",
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device visible to torch")'
}

export -f gpu_model
export PY
part gpu_model "$LIMIT_MODEL" bash -c gpu_model
part pytest_cuda "$LIMIT_PYTEST" "$PY" -m pytest -m cuda -q -p no:cacheprovider "${PYTEST_ARGS[@]}"
part bench_m3g "$LIMIT_M3G" "$PY" "${BENCH[@]}" --out "$DEST/bench_m3g" "${BENCH_ARGS[@]}" "${M3G_ARGS[@]}" --skip train,memory
part bench_train "$LIMIT_TRAIN" "$PY" "${BENCH[@]}" --out "$DEST/bench_train" "${BENCH_ARGS[@]}" --skip m3g,memory
part bench_memory "$LIMIT_MEMORY" "$PY" "${BENCH[@]}" --out "$DEST/bench_memory" "${BENCH_ARGS[@]}" --skip m3g,train

{ echo; echo "GPU model:"; sed 's/^/    /' "$DEST/gpu_model.log"; echo; echo "total: $((SECONDS - START)) s"; } >> "$SUMMARY"
echo
cat "$SUMMARY"
if [ "${#FAILED[@]}" -gt 0 ]; then
  echo "gpu_check.sh: failed or timed out: ${FAILED[*]} (see $DEST/<part>.log)" >&2
  exit 1
fi
