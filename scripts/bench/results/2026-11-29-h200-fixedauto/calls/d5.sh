# call 5 (one H200): StepLag records read pairs again; auto tries the CPU only where its bound
# is 10% over the GPU's rate. The tests around them, then 500x375: ResNet-50 auto against
# cuda (auto not benchmarked there since LargeOnCpu), ResNet-18 auto, priority -1 stream
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call5; mkdir -p $o; start=$(date +%s)
a=$BENCH_DATA/fixed-16000.tgz
( [ -f $a ] || python3 scripts/bench/make_imagenet_like.py --sizes fixed --images 16000 --out $a 2>&1 | tail -1 ) > $o/gen.log 2>&1 &
bash scripts/bench/gpu_host.sh $o/t tests tests/test_share.py tests/test_prefetch.py tests/test_gpudecode.py \
  -k "step_lag or large or auto_decode or threshold or trial or share" 2>&1 | tail -3
echo "tests at $(( $(date +%s) - start )) s"; wait; cat $o/gen.log
export PYTHONPATH="$PWD/.cache/site:$PWD" PYTHONUNBUFFERED=1
timeout $(( 560 - ($(date +%s) - start) )) python3 scripts/bench/bench.py --archive $a --shards 0 \
  --models resnet50 --recipes ceiling,ours --decode auto,cuda --warmup 300 --steps 3000 \
  --max-seconds 6 --step-priority -1 --out $o/r50.json 2>&1 | grep -a "^    \(ceiling\|ours\)\|cpu_large\|cpu bound" | cut -c 1-600
echo "r50 at $(( $(date +%s) - start )) s"
timeout $(( 585 - ($(date +%s) - start) )) python3 scripts/bench/bench.py --archive $a --shards 0 \
  --models resnet18 --recipes ceiling,ours --decode auto --warmup 300 --steps 3000 \
  --max-seconds 6 --step-priority -1 --out $o/r18.json 2>&1 | grep -a "^    \(ceiling\|ours\)\|cpu_large\|cpu bound" | cut -c 1-600
echo wall $(( $(date +%s) - start )) s
