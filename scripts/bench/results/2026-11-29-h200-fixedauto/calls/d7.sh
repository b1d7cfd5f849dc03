# call 7 (one H200, after call 6): ResNet-18 on 500x375, auto with 8 workers (cuda's count)
# against auto's default, in one bench.py each
export BENCH_DATA=.cache/bench-data PYTHONPATH="$PWD/.cache/site:$PWD" PYTHONUNBUFFERED=1
o=$OUT/call7; mkdir -p $o; start=$(date +%s); a=$BENCH_DATA/fixed-16000.tgz
for w in 8 15; do
timeout $(( 200 - ($(date +%s) - start) )) python3 scripts/bench/bench.py --archive $a --shards 0 \
  --models resnet18 --recipes ceiling,ours --decode auto --workers $w --warmup 300 --steps 3000 \
  --max-seconds 6 --step-priority -1 --out $o/r18-w$w.json 2>&1 | grep -a "^    \(ceiling\|ours\)\|cpu_large\|cpu bound" | cut -c 1-300
done
echo wall $(( $(date +%s) - start )) s
