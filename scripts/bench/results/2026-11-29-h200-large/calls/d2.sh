# call 2 (the host of call 1, warm): ResNet-18 on photos, priority -1, cpu_large off / 2 MP,
# A B | B A; then 500x375 (R18, R50, priority -1) on this tree; probe_engines on 500x375
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call2; mkdir -p $o; start=$(date +%s)
bash scripts/bench/gpu_host.sh $o none >/dev/null 2>&1
export PYTHONPATH="$PWD/.cache/site:$PWD" PYTHONUNBUFFERED=1
a=$BENCH_DATA/photos-16000.tgz
r=0; for order in none,2000000 2000000,none; do r=$((r+1))
  timeout $(( 585 - ($(date +%s) - start) )) python3 scripts/bench/bench.py --archive $a --shards 0 \
    --models resnet18 --recipes ceiling,ours --decode cuda --cpu-large $order --warmup 150 --steps 2000 \
    --max-seconds 6 --step-priority -1 --out $o/r18-large-$r.json 2>&1 | grep -a "^    \(ceiling\|ours\)" | sed "s/^/photos round $r: /"
done
f=$BENCH_DATA/fixed-16000.tgz
[ -f $f ] || python3 scripts/bench/make_imagenet_like.py --sizes fixed --images 16000 --out $f 2>&1 | tail -1
timeout $(( 585 - ($(date +%s) - start) )) python3 scripts/bench/bench.py --archive $f --shards 0 \
  --models resnet18,resnet50 --recipes ceiling,ours --decode cuda --warmup 150 --steps 2000 \
  --max-seconds 6 --step-priority -1 --out $o/fixed--1.json 2>&1 | grep -a "^    \(ceiling\|ours\)" | sed "s/^/fixed: /"
echo "at $(( $(date +%s) - start )) s"
timeout $(( 590 - ($(date +%s) - start) )) bash scripts/bench/gpu_host.sh $o engines fixed 2>&1 | tail -7
echo wall $(( $(date +%s) - start )) s
