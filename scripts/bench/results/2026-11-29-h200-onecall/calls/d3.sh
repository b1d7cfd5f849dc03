# call 3 (one H200, warm after call 2): the CUDA loader's tests through GpuDecode (test_loader,
# test_share, test_prefetch), then ResNet-18 on photos, this tree against c29d2b2, two more
# interleaved pairs (unspied), and the photos loader alone pair that call 2 mis-called.
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call3; mkdir -p $o; start=$(date +%s)
a=$BENCH_DATA/photos-16000.tgz
( [ -f $a ] || python3 scripts/bench/make_imagenet_like.py --sizes photos --images 16000 --out $a 2>&1 | tail -1 ) > $o/gen.log 2>&1 &
timeout 250 bash scripts/bench/gpu_host.sh $o/t tests tests/test_loader.py tests/test_share.py tests/test_prefetch.py 2>&1 | tail -2
echo "tests at $(( $(date +%s) - start )) s"; wait; cat $o/gen.log
export PYTHONPATH="$PWD/.cache/site:$PWD" PYTHONUNBUFFERED=1
row() {  # SIDE TAG
  local tree=.; [ $1 = base ] && tree=.cache/base
  timeout $(( 590 - ($(date +%s) - start) )) python3 $tree/scripts/bench/bench.py --archive $a --shards 0 \
    --models resnet18 --recipes ours --decode cuda --warmup 300 --steps 3000 --max-seconds 6 \
    --step-priority -1 --out $o/r18-$1-$2.json 2>&1 | grep -a "^    ours" | cut -c 1-200 | sed "s/^/$1 $2: /"
}
alone() {  # SIDE TAG
  local tree=.; [ $1 = base ] && tree=.cache/base
  timeout $(( 590 - ($(date +%s) - start) )) python3 $tree/scripts/bench/bench.py --archive $a --shards 0 \
    --models= --recipes loader --decode cuda --warmup 100 --steps 100000 --max-seconds 8 \
    --out $o/alone-$1-$2.json 2>&1 | grep -a "^  ours loader alone" | cut -c 1-120 | sed "s/^/$1 $2: /"
}
row base 3; row this 3; row this 4; row base 4
alone this photos; alone base photos
echo wall $(( $(date +%s) - start )) s
