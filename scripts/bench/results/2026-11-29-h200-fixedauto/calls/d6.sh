# call 6 (one H200, after call 5): ResNet-18 on 500x375, cuda against auto, then auto against
# cuda (call 5's auto row fed 88.1%; is it auto?)
export BENCH_DATA=.cache/bench-data PYTHONPATH="$PWD/.cache/site:$PWD" PYTHONUNBUFFERED=1
o=$OUT/call6; mkdir -p $o; start=$(date +%s); a=$BENCH_DATA/fixed-16000.tgz
for order in cuda,auto auto,cuda; do
timeout $(( 300 - ($(date +%s) - start) )) python3 scripts/bench/bench.py --archive $a --shards 0 \
  --models resnet18 --recipes ceiling,ours --decode $order --warmup 300 --steps 3000 \
  --max-seconds 6 --step-priority -1 --out $o/r18-$order.json 2>&1 | grep -a "^    \(ceiling\|ours\)\|cpu_large\|cpu bound" | cut -c 1-400
done
echo wall $(( $(date +%s) - start )) s
