# call 4 (one H200): three lanes of the engines fed the loader alone 15,900 img/s against 14,685
# (call 3); beside ResNet-18 they fed less, but with prefetch 3 (call 1). Now with prefetch 2:
# ResNet-18 (two rounds) and ResNet-50 (one), two lanes (base) against three (this); four lanes alone.
o=$OUT/call4; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
export BENCH_DATA=.cache/bench-data
el "ResNet-18, lanes hw+hw (base) against hw+hw+hw (this), prefetch 2, steps at -1"
BASE=. MODELS=resnet18 WARMUP=300 WINDOW=6 ARGS="--step-priority -1" \
  THIS_ARGS="--step-priority -1 --gpu-lanes hw+hw+hw" \
  timeout 230 bash scripts/bench/gpu_host.sh $o/a versus photos 2>&1 | grep -a "photos round" | tail -4
el "ResNet-50, the same, one round"
BASE=. MODELS=resnet50 WARMUP=300 WINDOW=6 ROUNDS=1 ARGS="--step-priority -1" \
  THIS_ARGS="--step-priority -1 --gpu-lanes hw+hw+hw" \
  timeout 110 bash scripts/bench/gpu_host.sh $o/b versus photos 2>&1 | grep -a "photos round" | tail -2
export PYTHONPATH="$PWD/.cache/site:$PWD"
el "loader alone, four lanes"
timeout 40 python3 scripts/bench/bench.py --archive $BENCH_DATA/photos-16000.tgz --shards 0 --models= \
  --recipes loader --decode cuda --gpu-lanes hw+hw+hw+hw --warmup 100 --steps 100000 --max-seconds 8 \
  --out $o/lanes4.json 2>&1 | grep -a "loader alone" | head -1
el done
