# call 1 (one H200): the lanes' decode in one call without a Python object per JPEG
# (nvbatch.DecodedBatch, gpucrop from its geometry table). The GPU decoders' tests, then
# ResNet-18 on photos fed by this tree and by c29d2b2 (.cache/base), rows interleaved,
# steps on a priority -1 stream, decode="cuda".
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call1; mkdir -p $o; start=$(date +%s)
a=$BENCH_DATA/photos-16000.tgz
( [ -f $a ] || python3 scripts/bench/make_imagenet_like.py --sizes photos --images 16000 --out $a 2>&1 | tail -1 ) > $o/gen.log 2>&1 &
bash scripts/bench/gpu_host.sh $o/t tests tests/test_nvbatch.py tests/test_gpudecode.py tests/test_gpujpeg.py 2>&1 | tail -3
echo "tests at $(( $(date +%s) - start )) s"; wait; cat $o/gen.log
export PYTHONPATH="$PWD/.cache/site:$PWD" PYTHONUNBUFFERED=1
row() {  # SIDE TAG RECIPES
  local tree=.; [ $1 = base ] && tree=.cache/base
  timeout $(( 590 - ($(date +%s) - start) )) python3 $tree/scripts/bench/bench.py --archive $a --shards 0 \
    --models resnet18 --recipes $3 --decode cuda --warmup 300 --steps 3000 --max-seconds 6 \
    --step-priority -1 --out $o/r18-$1-$2.json 2>&1 | grep -a "^    \(ceiling\|ours\)" | cut -c 1-300 | sed "s/^/$1 $2: /"
}
row this 1 ceiling,ours; row base 1 ours; row base 2 ours; row this 2 ours
echo wall $(( $(date +%s) - start )) s
