# call 5 (one H200, ~210 s of device time left): the second lane of the engines works only
# while the consumer has no batch waiting (lanes_on_demand; call 1: 388 and 225 decode calls).
# ResNet-18 on photos, on demand (base) against both lanes always at work (this), two pairs.
o=$OUT/call5; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
export BENCH_DATA=.cache/bench-data
el "ResNet-18, lanes on demand (base) against always (this), steps at -1"
BASE=. MODELS=resnet18 WARMUP=300 WINDOW=6 ARGS="--step-priority -1" THIS_ARGS="--lanes-always" \
  bash scripts/bench/gpu_host.sh $o/a versus photos 2>&1 | grep -a --line-buffered "photos round\|images in"
el done
