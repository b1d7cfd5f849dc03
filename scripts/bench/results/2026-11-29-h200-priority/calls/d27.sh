# call 27 (next session, one H200, fresh): --step-priority -1 against the default stream for
# ResNet-18 and ResNet-50 on KIND (photos | fixed), rows interleaved A B A B (~9 min)
KIND=${KIND:-photos}
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call27-$KIND; mkdir -p $o; start=$(date +%s)
bash scripts/bench/gpu_host.sh $o none 2>&1 | tail -3
export PYTHONPATH="$PWD/.cache/site:$PWD" PYTHONUNBUFFERED=1
a=$BENCH_DATA/$KIND-16000.tgz
[ -f $a ] || python3 scripts/bench/make_imagenet_like.py --sizes $KIND --images 16000 --out $a 2>&1 | tail -1
for r in 1 2; do for p in default -1; do
  flag=$([ $p = default ] || echo "--step-priority $p")
  timeout $(( 580 - ($(date +%s) - start) )) python3 scripts/bench/bench.py --archive $a --shards 0 \
    --models resnet18,resnet50 --recipes ceiling,ours --decode cuda --warmup 150 --steps 2000 \
    --max-seconds 6 $flag --out $o/$p-$r.json 2>&1 | grep -a "ceiling \|ours " | tail -4 | sed "s/^/$p round $r: /"
done; done
echo wall $(( $(date +%s) - start )) s
