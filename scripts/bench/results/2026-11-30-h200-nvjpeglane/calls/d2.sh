# call 2 (one H200): the package's nvJPEG lane now with nvJPEG's memory pools (call 1: without
# them, photos loader alone 13,134 against 14,061; did buffers freed and allocated per batch
# cost it?). Its CUDA tests again, then photos: loader alone and ResNet-18, interleaved
o=$OUT/call2; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
export BENCH_DATA=.cache/bench-data
el "tests: nvjpeg"
timeout 150 bash scripts/bench/gpu_host.sh $o tests tests/test_nvjpeg.py tests/test_gpudecode.py \
  -k "nvjpeg" 2>&1 | tail -1
el "loader alone, photos: auto vs nvjpeg+nvjpeg"
BASE=. ROUNDS=2 WINDOW=8 THIS_ARGS="--gpu-lanes nvjpeg+nvjpeg" timeout 200 \
  bash scripts/bench/gpu_host.sh $o/v versus photos 2>&1 | grep -a "round"
el "ResNet-18 fed, photos: auto vs nvjpeg+nvjpeg"
BASE=. MODELS=resnet18 WARMUP=300 WINDOW=6 ARGS="--step-priority -1" \
  THIS_ARGS="--step-priority -1 --gpu-lanes nvjpeg+nvjpeg" timeout 170 \
  bash scripts/bench/gpu_host.sh $o/v versus photos 2>&1 | grep -a "round"
el done
