#!/usr/bin/env bash
# The full GPU-host evidence run, in one call (about 8 minutes on an H200 host):
#   bash scripts/gpu_full.sh OUT_DIR
# CUDA tests; the benchmark against the ceiling and peers (ResNet-50 and -18, CPU and GPU
# decode, prefetch 0/1/2/4) with its chart; a profiler timeline of prefetch 0 vs 2; pinned vs
# registered vs pageable copy bandwidth; and the training script with --prefetch 0 and 2.
set -uo pipefail
out=${1:-bench-out}
mkdir -p "$out"
data=/tmp/bench/imagenet-like.tgz
bash scripts/gpu_checks.sh "$out" \
  "tests/test_prefetch.py tests/test_loader.py tests/test_gpudecode.py tests/test_timeline.py tests/test_parallel.py tests/test_train.py" \
  --archive "$data" --models resnet50,resnet18 --prefetch 0,1,2,4 --decode cpu,cuda \
  --steps 50 --warmup 10 --max-seconds 20 --trace "$out/trace.json"
export PYTHONPATH="${PYTHONPATH:-/tmp/site}:$PWD"
python3 scripts/plot_timeline.py "$out/trace-p0-resnet50.json" --compare "$out/trace-p2-resnet50.json" \
  --labels "prefetch=0" "prefetch=2" --out "$out/timeline.png" --title "ResNet-50 steps" \
  2>&1 | tail -20 | tee "$out/timeline.txt"
gzip -f "$out"/trace-*.json
python3 scripts/bench_h2d.py --out "$out/h2d.json" 2>&1 | tail -12
for p in 0 2; do
  python3 scripts/train_resnet.py --data "$data" --val /tmp/bench/imagenet-like-shard-00000.tgz \
    --arch resnet50 --size 224 --batch-size 256 --epochs 1 --max-steps 40 --prefetch $p \
    --out-dir "$out/train-p$p" 2>&1 | grep -v "^\s*$" | tail -4
done
