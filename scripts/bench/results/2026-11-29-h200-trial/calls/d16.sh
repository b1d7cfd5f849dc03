# call 16 (one GPU): does GPU decoding of photos warm up over epochs, and do DALI's decoder pools
# (IMAGELOADER_DECODER_POOLS=1) shorten it? Loader alone, 4 whole epochs, by tenths, interleaved;
# then ResNet-18 fed, 1 GPU, eager, 5 epochs of 60 steps, default against pools
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call16; mkdir -p $o
start=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$PWD/.cache/site" .whl/*.whl; rm -f "$PWD/.cache/site/nvidia/__init__.py"
export PYTHONPATH="$PWD/.cache/site:$PWD" PYTHONUNBUFFERED=1
python3 scripts/bench/make_imagenet_like.py --sizes photos --images 32000 --shards 0 \
    --out $BENCH_DATA/photos-32000.tgz 2>&1 | tail -1
python3 scripts/bench/make_imagenet_like.py --images 1000 --seed 1 \
    --out $BENCH_DATA/val-1000.tgz 2>&1 | tail -1
a=$BENCH_DATA/photos-32000.tgz
for round in 1 2; do
  for pools in 0 1; do
    echo "== loader alone, round $round, pools=$pools at $(( $(date +%s) - start )) s"
    IMAGELOADER_DECODER_POOLS=$pools timeout 100 python3 scripts/bench/probe_start.py --archive $a \
      --decode auto --epochs 4 --out $o/alone-$round-$pools.json > $o/alone-$round-$pools.log 2>&1
    grep -a '^epoch' $o/alone-$round-$pools.log
  done
done
for pools in 0 1; do
  echo "== ResNet-18 fed, pools=$pools at $(( $(date +%s) - start )) s"
  IMAGELOADER_DECODER_POOLS=$pools timeout 120 python3 scripts/train_resnet.py --data $a \
    --val $BENCH_DATA/val-1000.tgz --size 224 --batch-size 256 --max-steps 60 --workers 15 \
    --print-every 0 --arch resnet18 --epochs 5 --no-cuda-graph --out-dir $o/r18-$pools \
    > $o/r18-$pools.log 2>&1
  python3 - $o/r18-$pools <<'PY'
import json, sys, glob
for f in glob.glob(sys.argv[1] + "/*.jsonl"):
    for l in open(f):
        d = json.loads(l)
        if "steady_img_per_s" in d:
            print(d["epoch"], round(d["steady_img_per_s"]), [round(x, 1) for x in d["steady_wait_pct_per_rank"]])
PY
done
echo wall $(( $(date +%s) - start )) s
