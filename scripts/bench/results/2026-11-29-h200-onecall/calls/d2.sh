# call 2 (one H200, a fresh host): the failing test adapted (the lanes decode through
# decode_at now), then the loader alone (500x375 and photos) and ResNet-18 on photos under
# py-spy --gil, this tree against c29d2b2 (.cache/base), decode="cuda".
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call2; mkdir -p $o; start=$(date +%s)
a=$BENCH_DATA/photos-16000.tgz f=$BENCH_DATA/fixed-16000.tgz
( for k in fixed photos; do [ -f $BENCH_DATA/$k-16000.tgz ] || python3 scripts/bench/make_imagenet_like.py \
    --sizes $k --images 16000 --out $BENCH_DATA/$k-16000.tgz 2>&1 | tail -1; done ) > $o/gen.log 2>&1 &
bash scripts/bench/gpu_host.sh $o/t tests tests/test_gpudecode.py tests/test_nvbatch.py \
  -k "drop_last_batches_stay_full or table or retried or regions or refusals" 2>&1 | tail -2
echo "tests at $(( $(date +%s) - start )) s"; wait; cat $o/gen.log
export PYTHONPATH="$PWD/.cache/site:$PWD" PYTHONUNBUFFERED=1 PATH="$PWD/.cache/site/bin:$PATH"
alone() {  # SIDE ARCHIVE TAG
  local tree=.; [ $1 = base ] && tree=.cache/base
  timeout $(( 590 - ($(date +%s) - start) )) python3 $tree/scripts/bench/bench.py --archive $2 --shards 0 \
    --models= --recipes loader --decode cuda --warmup 100 --steps 100000 --max-seconds 8 \
    --out $o/alone-$1-$3.json 2>&1 | grep -a "loader alone" | cut -c 1-200 | sed "s/^/$1 $3: /"
}
alone base fixed 1; alone this fixed 1; alone this fixed 2; alone base fixed 2
alone this photos 1; alone base photos 1
echo "alone at $(( $(date +%s) - start )) s"
spied() {  # SIDE: ResNet-18 on photos, py-spy --gil over its 10-s window
  local tree=.; [ $1 = base ] && tree=.cache/base
  timeout $(( 590 - ($(date +%s) - start) )) python3 $tree/scripts/bench/bench.py --archive $a --shards 0 \
    --models resnet18 --recipes ours --decode cuda --warmup 300 --steps 3000 --max-seconds 10 \
    --step-priority -1 --spy $o/spy-$1 --spy-gil --out $o/r18-spied-$1.json 2>&1 \
    | grep -a "^    ours\|py-spy" | cut -c 1-300 | sed "s/^/$1: /"
  python3 scripts/bench/summarize_stacks.py $o/spy-$1/stacks-*.txt --ticks 450 --top 6 > $o/gil-$1.txt 2>&1
  grep -a "held the GIL" $o/gil-$1.txt | head -4 | sed "s/^/$1: /"
}
spied this; spied base
echo wall $(( $(date +%s) - start )) s
