# call 5 (one H200): StepLag records no new point while `keep` wait (a host far ahead is
# measured, not lost); the tests, then ResNet-50 on photos, cuda against auto (the reverse
# order of call 4), priority -1 stream, 300 untimed steps first
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call5; mkdir -p $o; start=$(date +%s)
bash scripts/bench/gpu_host.sh $o/t tests tests/test_share.py tests/test_prefetch.py tests/test_gpudecode.py \
  -k "step_lag or large or auto_decode or threshold" 2>&1 | tail -3
echo "tests at $(( $(date +%s) - start )) s"
export PYTHONPATH="$PWD/.cache/site:$PWD" PYTHONUNBUFFERED=1
a=$BENCH_DATA/photos-16000.tgz
[ -f $a ] || python3 scripts/bench/make_imagenet_like.py --sizes photos --images 16000 --out $a 2>&1 | tail -1
timeout $(( 400 - ($(date +%s) - start) )) python3 scripts/bench/bench.py --archive $a --shards 0 \
  --models resnet50 --recipes ceiling,ours --decode cuda,auto --warmup 300 --steps 3000 \
  --max-seconds 6 --step-priority -1 --out $o/r50.json 2>&1 | grep -a "^    \(ceiling\|ours\)\|cpu_large" | cut -c 1-600
echo wall $(( $(date +%s) - start )) s
