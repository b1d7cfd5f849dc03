# call 1 (one H200): with the loader's streams most urgent (the default since 137128f), is
# ResNet-18 on photos fed better with its steps at priority 0 (a side stream) or -1? And a third
# lane of the engines with prefetch 3, against two. Then the decode call's host time beside the model.
o=$OUT/call1; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
export BENCH_DATA=.cache/bench-data
el "steps at 0 (base) against -1 (this), ResNet-18, photos"
BASE=. MODELS=resnet18 WARMUP=300 WINDOW=6 ARGS="--step-priority 0" THIS_ARGS="--step-priority -1" \
  timeout 280 bash scripts/bench/gpu_host.sh $o/a versus photos 2>&1 | grep -v "^$" | tail -8
export PYTHONPATH="$PWD/.cache/site:$PWD"
el "ceiling"
timeout 50 python3 scripts/bench/bench.py --archive $BENCH_DATA/photos-16000.tgz --shards 0 --models resnet18 \
  --recipes ceiling --warmup 100 --steps 3000 --max-seconds 6 --out $o/c.json 2>&1 | grep -a "ceiling" | head -3
el "two lanes (base) against three lanes and prefetch 3 (this), steps at -1"
BASE=. MODELS=resnet18 WARMUP=300 WINDOW=6 ARGS="--step-priority -1" \
  THIS_ARGS="--step-priority -1 --gpu-lanes hw+hw+hw --prefetch 3" \
  timeout 190 bash scripts/bench/gpu_host.sh $o/b versus photos 2>&1 | grep -v "^$" | tail -4
el "decode call's host time beside ResNet-18"
timeout 60 python3 scripts/bench/bench.py --archive $BENCH_DATA/photos-16000.tgz --shards 0 --models resnet18 \
  --recipes ours --decode cuda --warmup 300 --steps 3000 --max-seconds 6 --step-priority -1 \
  --time-calls imageloader.gpujpeg:NvImageCodecJpeg.decode_at,imageloader.prefetch:Prefetcher._hand_over \
  --out $o/t.json 2>&1 | grep -a -A6 "^ours" | head -14
el done
