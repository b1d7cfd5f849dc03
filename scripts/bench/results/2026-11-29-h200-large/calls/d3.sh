# call 3 (one H200): decode="auto" sending large JPEGs to the packers for a GPU-bound model
# (share.LargeOnCpu): its tests (CUDA included), then ResNet-50 and ResNet-18 on photos on a
# priority -1 stream, --decode auto against cuda, A B | B A, 300 untimed steps first
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call3; mkdir -p $o; start=$(date +%s)
git log --oneline -1 > $o/tree.txt
bash scripts/bench/gpu_host.sh $o/t tests tests/test_share.py tests/test_prefetch.py tests/test_gpudecode.py \
  -k "step_lag or large or auto_decode or share or threshold" 2>&1 | tail -3
echo "tests at $(( $(date +%s) - start )) s"
export PYTHONPATH="$PWD/.cache/site:$PWD" PYTHONUNBUFFERED=1
a=$BENCH_DATA/photos-16000.tgz
[ -f $a ] || python3 scripts/bench/make_imagenet_like.py --sizes photos --images 16000 --out $a 2>&1 | tail -1
r=0; for order in auto,cuda cuda,auto; do r=$((r+1))
  timeout $(( 590 - ($(date +%s) - start) )) python3 scripts/bench/bench.py --archive $a --shards 0 \
    --models resnet50,resnet18 --recipes ceiling,ours --decode $order --warmup 300 --steps 3000 \
    --max-seconds 6 --step-priority -1 --out $o/auto-$r.json 2>&1 | grep -a "^    \(ceiling\|ours\)\|cpu_large" | sed "s/^/round $r: /"
done
echo wall $(( $(date +%s) - start )) s
