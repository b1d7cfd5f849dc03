#!/usr/bin/env bash
# Training fed by GPU decoding under several settings, in one call (~4 minutes each part):
#   bash scripts/gpu_probe_queues.sh OUT_DIR [queues|shares|auto]
# queues (default): 8 vs 32 hardware queues, niceness, Triton vs roi_align crops;
# shares: fixed CPU shares at 32 queues (the manual form of an adaptive share), both models;
# auto: cpu_share="auto" against 0, a fixed 0.5 and CPU decode, in the steady state (a
# 48,000-image archive, 40 untimed steps: more than any loader's buffers hold).
# Rows of scripts/probe_contention.py --parts options (each setting twice, interleaved).
# The variable is set here explicitly for every row: 8 (CUDA's default) vs 32 (what
# imageloader.configure_cuda_queues() asks for; it keeps a value set in the environment).
set -uo pipefail
out=${1:-bench-out}; part=${2:-queues}
if [ "$part" = auto ]; then
  images=48000; data=${BENCH_DATA:-bench-data}/imagenet-48000.tgz  # as gpu_steady.sh
else
  images=16000; data=${BENCH_DATA:-bench-data}/imagenet-like.tgz   # as in earlier runs
fi
mkdir -p "$out"
{
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$PWD/.cache/site" .whl/*.whl
fi
export PYTHONPATH="$PWD/.cache/site:$PWD" PYTHONUNBUFFERED=1
[ -f "$data" ] || python3 scripts/bench.py --archive "$data" --images $images --shards 0 \
  --recipes reader --out "$(mktemp -d)/reader.json" | tail -3
probe() { python3 scripts/probe_contention.py --archive "$data" --parts options --seconds 6 "$@" \
  | grep "^{"; }
# rows QUEUES NAME PROBE_FLAGS...: one probe run, its rows kept as NAME.jsonl
rows() { local queues=$1 name=$2; shift 2
  echo "== $name"; CUDA_DEVICE_MAX_CONNECTIONS=$queues probe "$@" | tee "$out/$name.jsonl"; }
if [ "$part" = queues ]; then
  rows 8 resnet18-q8 --model resnet18 --options '{}'
  rows 32 resnet18-q32 --model resnet18 \
    --options '{}' '{"worker_nice": 10}' '{"gpu_crop": "roi_align"}'
  rows 32 resnet50-q32 --model resnet50 \
    --options '{"decode": "cpu"}' '{}' '{"cpu_share": 0.3}' '{"worker_nice": 10}'
elif [ "$part" = auto ]; then
  rows 32 resnet50-auto --model resnet50 --seconds 10 --warmup 40 \
    --options '{"decode": "cpu"}' '{}' '{"cpu_share": "auto"}' '{"cpu_share": 0.5}'
  rows 32 resnet18-auto --model resnet18 --seconds 8 --warmup 40 \
    --options '{}' '{"cpu_share": "auto"}'
else
  rows 32 resnet18-shares --model resnet18 \
    --options '{}' '{"cpu_share": 0.15}' '{"cpu_share": 0.3}'
  rows 32 resnet50-shares --model resnet50 \
    --options '{"decode": "cpu"}' '{}' '{"cpu_share": 0.5}' '{"cpu_share": 0.7, "workers": 15}'
fi
} 2>&1 | tee "$out/run.log"
