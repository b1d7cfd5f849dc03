#!/usr/bin/env bash
# CUDA tests, then the benchmark in the steady state, in one call (about 7 minutes on an H200):
#   bash scripts/gpu_steady.sh OUT_DIR
# gpu_full.sh times 50 steps after 10 of warm-up on 16,000 images: a loader that filled its
# buffers before the timer (ours with CPU decode holds 19 batches, a DataLoader of 16 workers
# 32) then serves a third of the window from them, and a CPU path slower than the model reads
# as keeping up. Here every recipe first takes 40 untimed steps (more than any of them holds),
# then 60 timed ones, within the first epoch of a 48,000-image archive (187 batches).
# OUT_DIR receives pytest.log, bench.json, bench.log, bench-resnet50.png, bench-resnet18.png.
set -uo pipefail
out=${1:-bench-out}
data=${BENCH_DATA:-bench-data}/imagenet-48000.tgz  # built by bench.py (with 16 shards) if missing
bash scripts/gpu_checks.sh "$out" \
  "tests/test_prefetch.py tests/test_loader.py tests/test_gpudecode.py tests/test_share.py tests/test_timeline.py tests/test_parallel.py tests/test_train.py tests/test_index.py" \
  --archive "$data" --images 48000 --models resnet50,resnet18 --prefetch 2 --decode cpu,cuda \
  --recipes ceiling,ours,loader,peer-shards,timm-shards --steps 60 --warmup 40 --max-seconds 20
