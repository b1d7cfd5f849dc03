# call 36 (one H200): IMAGELOADER_DECODE_AHEAD=1 (each lane's decoder on a stream of its own,
# two buffers in turn): its CUDA tests, then ResNet-18 on photos with the steps at priority -1,
# rows off / on / on / off while the budget lasts
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call36; mkdir -p $o; start=$(date +%s)
bash scripts/bench/gpu_host.sh $o/t tests tests/test_gpudecode.py tests/test_nvbatch.py \
  -k "ahead or turn or busy" 2>&1 | tail -2
export PYTHONPATH="$PWD/.cache/site:$PWD" PYTHONUNBUFFERED=1
a=$BENCH_DATA/photos-16000.tgz
[ -f $a ] || python3 scripts/bench/make_imagenet_like.py --sizes photos --images 16000 --out $a 2>&1 | tail -1
echo "ready at $(( $(date +%s) - start )) s"
for ahead in 0 1 1 0; do
  left=$(( 400 - ($(date +%s) - start) )); [ $left -lt 70 ] && break
  IMAGELOADER_DECODE_AHEAD=$ahead timeout $left python3 scripts/bench/bench.py --archive $a --shards 0 \
    --models resnet18 --recipes ceiling,ours --decode cuda --warmup 150 --steps 2000 \
    --max-seconds 6 --step-priority -1 --out $o/ahead$ahead-$(date +%s).json 2>&1 \
    | grep -a "ceiling \|ours " | tail -2 | sed "s/^/ahead=$ahead: /"
done
echo wall $(( $(date +%s) - start )) s
