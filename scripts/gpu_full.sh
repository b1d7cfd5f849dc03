#!/usr/bin/env bash
# The full GPU-host evidence run, in one call (about 8 minutes on an H200 host):
#   bash scripts/gpu_full.sh OUT_DIR
# CUDA tests; the benchmark against the ceiling and peers (ResNet-50 and -18, CPU and GPU
# decode, prefetch 0/1/2) with its chart; a profiler timeline of prefetch 0 vs 2; pinned vs
# registered vs pageable copy bandwidth; and the training script with --prefetch 0 and 2.
# Its 50 timed steps follow only 10 of warm-up (kept for comparison with runs 1-9): recipes that
# buffer many batches look faster than they are; gpu_steady.sh times the steady state.
# OUT_DIR receives 8 files: bench.json, bench-resnet50.png, bench-resnet18.png, timeline.png,
# h2d.json, pytest.log, run.log (all console output) and gpu-decode-profile.jsonl.
set -uo pipefail
out=${1:-bench-out}
work=$(mktemp -d)
mkdir -p "$out"
data=${BENCH_DATA:-bench-data}/imagenet-like.tgz  # built by bench.py if missing
{
bash scripts/gpu_checks.sh "$work" \
  "tests/test_prefetch.py tests/test_loader.py tests/test_gpudecode.py tests/test_timeline.py tests/test_parallel.py tests/test_train.py tests/test_index.py" \
  --archive "$data" --models resnet50,resnet18 --prefetch 0,1,2 --decode cpu,cuda \
  --steps 50 --warmup 10 --max-seconds 20 --trace "$work/trace.json"
export PYTHONPATH="$PWD/.cache/site:$PWD"
python3 scripts/plot_timeline.py "$work/trace-p0-resnet50.json" \
  --compare "$work/trace-p2-resnet50.json" --labels "prefetch=0" "prefetch=2" \
  --out "$work/timeline.png" --title "ResNet-50 training steps" 2>&1 | tail -20
python3 scripts/bench_h2d.py --out "$work/h2d.json" 2>&1 | tail -12
echo "== GPU decode: host time per batch of its thread"
python3 scripts/profile_gpu_decode.py --archive "$data" --seconds 8 --nvjpeg-threads 2>&1 \
  | grep "^{" | tee "$work/gpu-decode-profile.jsonl"
for p in 0 2; do
  echo "== train_resnet.py --prefetch $p"
  python3 scripts/train_resnet.py --data "$data" --val "${data%.tgz}-shard-00000.tgz" \
    --arch resnet50 --size 224 --batch-size 256 --epochs 1 --max-steps 40 --prefetch $p \
    --out-dir "$work/train-p$p" 2>&1 | grep -v "it/s\]$" | tail -4
done
} 2>&1 | tee "$out/run.log"  # straight to OUT_DIR: kept even if the call is cut short
for f in bench.json bench-resnet50.png bench-resnet18.png timeline.png h2d.json pytest.log \
         gpu-decode-profile.jsonl; do
  [ -f "$work/$f" ] && cp "$work/$f" "$out/"
done
