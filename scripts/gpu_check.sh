#!/usr/bin/env bash
# the GPU checks as one command, for a machine with a CUDA GPU and no network (docs/BENCH.md, "GPU bench"):
#   bash scripts/gpu_check.sh                 on the GPU machine: the bench (python -m bench.gpu) and the GPU tests
#   bash scripts/gpu_check.sh --fetch-wheels  here, with network: the pinned wheels the GPU image lacks -> .gpu-wheels/
# The GPU image has torch, transformers, numpy, pandas, safetensors, tokenizers, tqdm and scipy; bertcore also
# needs sentencex and py3langid (bertcore/data/segmentation.py), carried as cp312 wheels in .gpu-wheels/ (gitignored).
# Results go to $OUT (default /tmp/gpu-check): gpu.json, gpu.txt (the tables), gpu.err (progress), nvidia-smi.txt,
# pytest.txt. Exit status: the bench's (0 all ran, 1 a section or row failed), or 2 when the wheels cannot be installed.
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=.gpu-wheels
PINS="sentencex==1.0.32 py3langid==0.4.0"  # as requirements.txt
PY="${PYTHON:-python3}"

if [ "${1:-}" = "--fetch-wheels" ]; then
  mkdir -p "$WHEELS"
  exec "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$WHEELS" $PINS
fi

OUT="${OUT:-/tmp/gpu-check}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ! "$PY" -c "import sentencex, py3langid" 2>/dev/null; then
  ls "$WHEELS"/*.whl >/dev/null 2>&1 || { echo "error: no wheels in $WHEELS; run 'bash scripts/gpu_check.sh --fetch-wheels' where pip has network and carry $WHEELS"; exit 2; }
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
    || { echo "error: the wheels in $WHEELS did not install (they are for CPython 3.12 on x86-64 Linux)"; exit 2; }
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,temperature.gpu --format=csv 2>&1 | tee "$OUT/nvidia-smi.txt"
"$PY" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpu', torch.cuda.is_available() and torch.cuda.get_device_name(0), 'transformers', transformers.__version__)"

# the bench: about 4 minutes on one H100; it skips what is left after --budget-s and prints as it goes
# (BENCH_ARGS="--quick --device cpu" tries this script on a machine without a GPU)
timeout 420 "$PY" -m bench.gpu ${BENCH_ARGS:-} --out "$OUT/gpu.json" 2>"$OUT/gpu.err" | tee "$OUT/gpu.txt"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || { echo "bench.gpu exited with $rc; the end of its progress:"; tail -n 25 "$OUT/gpu.err"; }

# the tests with a CUDA side (named cuda/gpu), without tests/conftest.py: it needs playwright, not on the GPU image
tests=$(grep -l "cuda" tests/test_*.py | grep -v test_bench_gpu.py | xargs grep -L "streamlit\|playwright\|AppTest" | tr '\n' ' ')
timeout 150 "$PY" -m pytest --noconftest -p no:cacheprovider -o addopts="" -q -rs -k "cuda or gpu" $tests \
  tests/test_bench_gpu.py::test_quick_on_a_gpu 2>&1 | tail -n 40 | tee "$OUT/pytest.txt"
exit "$rc"
