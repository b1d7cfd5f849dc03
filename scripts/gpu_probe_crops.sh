#!/usr/bin/env bash
# The Triton crop kernel on the GPU host, in one call (about 8 minutes on an H200 host):
#   bash scripts/gpu_probe_crops.sh OUT_DIR [MODEL]
# CUDA tests of the GPU stage and the prefetcher; GPU ms per batch of the crops both ways
# (bench_gpu_crop.py); MODEL (default resnet18) trained from ImageLoader(decode="cuda") per
# Options.gpu_crop x stream_priority (probe_contention.py --parts crops), then the same rows
# again with CUDA_DEVICE_MAX_CONNECTIONS=32 (more hardware queues: fewer false waits between
# the training's stream, ours and nvJPEG's).
set -uo pipefail
out=${1:-bench-out}; model=${2:-resnet18}
data=${BENCH_DATA:-bench-data}/imagenet-like.tgz
mkdir -p "$out"
{
bash scripts/gpu_checks.sh "$out" "tests/test_gpudecode.py tests/test_prefetch.py"
export PYTHONPATH="$PWD/.cache/site:$PWD" PYTHONUNBUFFERED=1
[ -f "$data" ] || python3 scripts/bench.py --archive "$data" --recipes reader \
  --out "$(mktemp -d)/reader.json" | tail -3
echo "== bench_gpu_crop.py"
python3 scripts/bench_gpu_crop.py | tee "$out/crop.jsonl"
echo "== probe_contention.py --model $model --parts crops"
python3 scripts/probe_contention.py --archive "$data" --model "$model" --parts crops \
  --seconds 6 | grep "^{" | tee "$out/crops-$model.jsonl"
echo "== the same, CUDA_DEVICE_MAX_CONNECTIONS=32"
CUDA_DEVICE_MAX_CONNECTIONS=32 python3 scripts/probe_contention.py --archive "$data" \
  --model "$model" --parts crops --seconds 6 | grep "^{" | tee "$out/crops-$model-conn32.jsonl"
} 2>&1 | tee "$out/run.log"
