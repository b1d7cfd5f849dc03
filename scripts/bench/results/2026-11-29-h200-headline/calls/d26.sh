# session 27, call 26 (one H200, fresh): ResNet-50 on photos stepping on a high-priority stream
# (bench.py --step-priority -1), against the default stream, rows interleaved A B A B; then the
# CUDA test of the option
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call26; mkdir -p $o; start=$(date +%s)
bash scripts/bench/gpu_host.sh $o none 2>&1 | tail -3
export PYTHONPATH="$PWD/.cache/site:$PWD" PYTHONUNBUFFERED=1
python3 -m pytest -q -p no:cacheprovider tests/test_scripts.py -k "priority" 2>&1 | tail -2
a=$BENCH_DATA/photos-16000.tgz
python3 scripts/bench/make_imagenet_like.py --sizes photos --images 16000 --out $a 2>&1 | tail -1
for r in 1 2; do for p in default -1; do
  flag=$([ $p = default ] || echo "--step-priority $p")
  timeout $(( 340 - ($(date +%s) - start) )) python3 scripts/bench/bench.py --archive $a --shards 0 \
    --models resnet50 --recipes ceiling,ours --decode cuda --warmup 150 --steps 2000 --max-seconds 6 \
    $flag --out $o/r50-$p-$r.json 2>&1 | grep -a "ceiling \|ours " | tail -2 | sed "s/^/$p round $r: /"
done; done
echo wall $(( $(date +%s) - start )) s
