# call 1 (one H200, fresh): probe_engines with its two rows taking turns (photos); then
# ResNet-50 on photos stepping on a priority -1 stream, Options.cpu_large off and from 2 MP,
# interleaved A B | B A (each bench.py run with its own data-on-GPU ceiling)
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call1; mkdir -p $o; start=$(date +%s)
git log --oneline -1 > $o/tree.txt; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $o/gpu.txt
bash scripts/bench/gpu_host.sh $o engines photos 2>&1 | tail -16
echo "engines done at $(( $(date +%s) - start )) s"
export PYTHONPATH="$PWD/.cache/site:$PWD" PYTHONUNBUFFERED=1
a=$BENCH_DATA/photos-16000.tgz
[ -f $a ] || python3 scripts/bench/make_imagenet_like.py --sizes photos --images 16000 --out $a 2>&1 | tail -1
echo "archive at $(( $(date +%s) - start )) s"
r=0; for order in none,2000000 2000000,none; do r=$((r+1))
  timeout $(( 585 - ($(date +%s) - start) )) python3 scripts/bench/bench.py --archive $a --shards 0 \
    --models resnet50 --recipes ceiling,ours --decode cuda --cpu-large $order --warmup 150 --steps 2000 \
    --max-seconds 6 --step-priority -1 --out $o/r50-large-$r.json 2>&1 | grep -a "ceiling \|ours " | sed "s/^/round $r: /"
done
echo wall $(( $(date +%s) - start )) s
