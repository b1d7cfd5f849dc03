# call 6: where the fed training thread blocks (py-spy dump --native, 12 samples)
export BENCH_DATA=.cache/bench-data
d=$BENCH_DATA; mkdir -p $d
[ -d .cache/site/nvidia ] || { python3 -m pip install -q --no-index --no-deps --no-compile --target $PWD/.cache/site .whl/*.whl; rm -f .cache/site/nvidia/__init__.py; }
export PYTHONPATH=$PWD/.cache/site:$PWD
[ -f $d/photos-16000.tgz ] || python3 scripts/bench/make_imagenet_like.py --sizes photos --images 16000 --out $d/photos-16000.tgz | tail -1
[ -f $d/val-1000.tgz ] || python3 scripts/bench/make_imagenet_like.py --images 1000 --seed 1 --out $d/val-1000.tgz | tail -1
CUDA_VISIBLE_DEVICES=0 python3 scripts/train_resnet.py --data $d/photos-16000.tgz --val $d/val-1000.tgz --size 224 --batch-size 256 --epochs 4 --max-steps 60 --workers 15 --print-every 0 --decode cuda --arch resnet18 --out-dir /tmp/r6 > /tmp/log 2>&1 &
pid=$!
sleep 21
for i in $(seq 1 14); do
  echo "=== sample $i"; timeout 5 .cache/site/bin/py-spy dump --pid $pid --native 2>&1 | awk '/^Thread/{n++} n==1' | head -14
  sleep 0.3
done > $OUT/dumps.txt
wait $pid; grep '^steady' /tmp/log | tail -2
grep -c . $OUT/dumps.txt; head -80 $OUT/dumps.txt
