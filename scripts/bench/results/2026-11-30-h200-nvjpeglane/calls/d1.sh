# call 1 (one H200, fresh): branch nvjpeg-lane on a GPU for the first time. Its CUDA tests,
# then the loader alone and ResNet-18 fed, default lanes (hw+hw) against nvjpeg+nvjpeg, interleaved
o=$OUT/call1; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
export BENCH_DATA=.cache/bench-data
el "tests: nvjpeg lane, lanes, busy GPU, probe_nvjpeg"
timeout 200 bash scripts/bench/gpu_host.sh $o tests tests/test_nvjpeg.py tests/test_gpudecode.py \
  tests/test_scripts.py -k "nvjpeg or lanes_give or busy_gpu" 2>&1 | tail -4
grep -a -E "passed|failed|Error|error" $o/pytest.log | tail -15
for kind in fixed photos; do
  el "loader alone, $kind: auto vs nvjpeg+nvjpeg"
  BASE=. ROUNDS=1 WINDOW=8 THIS_ARGS="--gpu-lanes nvjpeg+nvjpeg" timeout 120 \
    bash scripts/bench/gpu_host.sh $o/v versus $kind 2>&1 | grep -a "round"
done
for kind in fixed photos; do
  el "ResNet-18 fed, $kind: auto vs nvjpeg+nvjpeg"
  BASE=. MODELS=resnet18 WARMUP=300 WINDOW=6 ARGS="--step-priority -1" \
    THIS_ARGS="--step-priority -1 --gpu-lanes nvjpeg+nvjpeg" timeout 170 \
    bash scripts/bench/gpu_host.sh $o/v versus $kind 2>&1 | grep -a "round"
done
el done
