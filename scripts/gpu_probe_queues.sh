#!/usr/bin/env bash
# Hardware queues, crops, niceness and CPU share with GPU decoding, in one call (~6 minutes):
#   bash scripts/gpu_probe_queues.sh OUT_DIR
# Rows of scripts/probe_contention.py --parts options (each setting twice, interleaved).
# probe_contention.py imports imageloader only after CUDA has started, so the variable is set
# here explicitly: 8 (CUDA's default) vs 32 (what `import imageloader` asks for).
set -uo pipefail
out=${1:-bench-out}
data=${BENCH_DATA:-bench-data}/imagenet-like.tgz
mkdir -p "$out"
{
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$PWD/.cache/site" .whl/*.whl
fi
export PYTHONPATH="$PWD/.cache/site:$PWD" PYTHONUNBUFFERED=1
[ -f "$data" ] || python3 scripts/bench.py --archive "$data" --recipes reader \
  --out "$(mktemp -d)/reader.json" | tail -3
probe() { python3 scripts/probe_contention.py --archive "$data" --parts options --seconds 6 "$@" \
  | grep "^{"; }
echo "== resnet18, 8 queues"
CUDA_DEVICE_MAX_CONNECTIONS=8 probe --model resnet18 --options '{}' | tee "$out/resnet18-q8.jsonl"
echo "== resnet18, 32 queues"
CUDA_DEVICE_MAX_CONNECTIONS=32 probe --model resnet18 \
  --options '{}' '{"worker_nice": 10}' '{"gpu_crop": "roi_align"}' | tee "$out/resnet18-q32.jsonl"
echo "== resnet50, 32 queues"
CUDA_DEVICE_MAX_CONNECTIONS=32 probe --model resnet50 \
  --options '{"decode": "cpu"}' '{}' '{"cpu_share": 0.3}' '{"worker_nice": 10}' \
  | tee "$out/resnet50-q32.jsonl"
} 2>&1 | tee "$out/run.log"
