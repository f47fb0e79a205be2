#!/usr/bin/env bash
# One short device session: every GPU test, then the GPU attention benchmark.
#
#   scripts/gpu_check.sh              # on a CUDA machine (~2-4 min on an H200; 8 at most)
#   scripts/gpu_check.sh --dry-run    # the same plumbing on CPU, tiny sizes (CI tests this)
#
# 1. the device: torch and CUDA versions, GPU name and memory;
# 2. pytest -m gpu: the fused kernels (flash, memory-efficient, cuDNN, PyTorch's choice)
#    in float16/bfloat16, forward and backward, against NumPy float64; the KV cache in
#    float16 (parity_tests/test_gpu.py);
# 3. python -m labs bench-attention --device cuda: time and peak memory of explicit vs
#    fused attention, forward + backward, T = 1k, 4k, 16k, as a table.
# Each stage has its own time limit, and the script goes on after a failing stage; it exits
# non-zero if any stage failed. PYTHON=/path/to/python to choose the interpreter.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

if [[ "${1:-}" == "--dry-run" ]]; then
    DEVICE=cpu; LENGTHS=(32); TEST_LIMIT=120; BENCH_LIMIT=120
    BENCH_EXTRA=(--impls numpy-flash torch-fused --iters 1)
else
    DEVICE=cuda; LENGTHS=(1024 4096 16384); TEST_LIMIT=270; BENCH_LIMIT=150
    BENCH_EXTRA=()
fi

status=0
stage() {  # stage NAME LIMIT_S CMD...: run with a time limit, report, remember failures
    local name=$1 limit=$2; shift 2
    echo; echo "=== ${name} (limit ${limit} s) ==="
    local t0=$SECONDS
    timeout --signal=INT --kill-after=10 "$limit" "$@"
    local rc=$?
    echo "=== ${name}: exit ${rc} after $((SECONDS - t0)) s ==="
    if [[ $rc -ne 0 ]]; then status=1; fi
}

stage "device" 60 "$PY" - "$DEVICE" <<'PYEOF'
import sys

import torch

print(f"torch {torch.__version__}, CUDA build {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}")
if sys.argv[1] == "cuda":
    if not torch.cuda.is_available():
        sys.exit("CUDA is not available: nothing to check")
    p = torch.cuda.get_device_properties(0)
    print(f"{p.name}, {p.total_memory / 2**30:.0f} GiB, compute capability {p.major}.{p.minor}")
else:
    print("dry run on CPU: the GPU tests skip, the benchmark runs tiny and on CPU")
PYEOF
stage "GPU parity tests" "$TEST_LIMIT" "$PY" -m pytest parity_tests/test_gpu.py -m gpu -q -rs \
    -p no:cacheprovider -o addopts=
stage "GPU attention benchmark" "$BENCH_LIMIT" "$PY" -m labs bench-attention \
    --device "$DEVICE" --lengths "${LENGTHS[@]}" "${BENCH_EXTRA[@]}"
echo
if [[ $status -eq 0 ]]; then echo "gpu_check: all stages passed"; else echo "gpu_check: a stage FAILED"; fi
exit $status
