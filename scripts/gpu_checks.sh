#!/usr/bin/env bash
# Everything the GPU host must show, in one call: CUDA tests, then the benchmark.
#   bash scripts/gpu_checks.sh OUT_DIR [TEST_SELECTION] [BENCH_FLAGS...]
# Optional wheels (rapidgzip, isal, webdataset) are installed from .whl/ if present.
set -uo pipefail
out=${1:-bench-out}; shift || true
tests=${1:-tests}; shift || true
mkdir -p "$out"
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$PWD/.cache/site" .whl/*.whl && export PYTHONPATH="$PWD/.cache/site"
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, torchvision, os; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'cores', os.cpu_count())"
if [ "$tests" != "none" ]; then
  python3 -m pytest -q -p no:cacheprovider $tests 2>&1 | tee "$out/pytest.log" | tail -25
fi
if [ "$#" -gt 0 ]; then
  python3 scripts/bench.py --out "$out/bench.json" --plot "$out/bench.png" "$@" 2>&1 | tee "$out/bench.log"
fi
