# call 1 (one H200): the CUDA tests of the commits that ran on the CPU only last session
# (921c801, 58ab5b0, 870f070, 1213c5e: test_nvbatch.py, test_gpudecode.py whole), the
# device's stream priority range, then ResNet-18 on photos (steps at priority -1) with the
# decode lanes' streams at the default priority 0 against -3 (above the steps), interleaved.
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call1; mkdir -p $o; start=$(date +%s)
a=$BENCH_DATA/photos-16000.tgz
( [ -f $a ] || python3 scripts/bench/make_imagenet_like.py --sizes photos --images 16000 --out $a 2>&1 | tail -1 ) > $o/gen.log 2>&1 &
timeout 280 bash scripts/bench/gpu_host.sh $o/t tests tests/test_nvbatch.py tests/test_gpudecode.py 2>&1 | tail -3
echo "tests at $(( $(date +%s) - start )) s"; wait; cat $o/gen.log
export PYTHONPATH="$PWD/.cache/site:$PWD" PYTHONUNBUFFERED=1
python3 - <<'PY'
import torch
for p in (0, -1, -2, -3, -5):
    print("asked", p, "got", torch.cuda.Stream(priority=p).priority)
PY
row() {  # LANES-PRIORITY TAG RECIPES
  timeout $(( 590 - ($(date +%s) - start) )) python3 scripts/bench/bench.py --archive $a --shards 0 \
    --models resnet18 --recipes $3 --decode cuda --warmup 300 --steps 3000 --max-seconds 6 \
    --step-priority -1 --stream-priority $1 --out $o/r18-lanes$1-$2.json 2>&1 | grep -a "^    \(ceiling\|ours\)" | cut -c 1-300 | sed "s/^/lanes $1 $2: /"
}
row 0 1 ceiling,ours; row -3 1 ours; row -3 2 ours; row 0 2 ours
echo wall $(( $(date +%s) - start )) s
