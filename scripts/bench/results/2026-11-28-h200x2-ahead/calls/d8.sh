# call 8 (2 GPUs): the --graph-ahead tests (one and two GPUs) while the photo archive is made;
# then ResNet-18 fed photos, 1 and 2 GPUs: replays at most 1 / 0 steps ahead, eager, unbounded
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call8; mkdir -p $o
start=$(date +%s)
nvidia-smi -L
( python3 scripts/bench/make_imagenet_like.py --sizes photos --images 32000 --shards 0 \
    --out $BENCH_DATA/photos-32000.tgz 2>&1 | tail -1
  python3 scripts/bench/make_imagenet_like.py --images 1000 --seed 1 \
    --out $BENCH_DATA/val-1000.tgz 2>&1 | tail -1 ) > $o/gen.log &
timeout 200 bash scripts/bench/gpu_host.sh $o tests tests/test_train.py -k graph > $o/tests.out 2>&1
echo tests rc=$?; tail -15 $o/tests.out
wait; cat $o/gen.log
echo "== ranks at $(( $(date +%s) - start )) s"
CHECKS=0 ARCHS=resnet18 FEEDS=loader STEPS_AS="graph:1 graph:0 eager graph" \
  timeout $(( 560 - ($(date +%s) - start) )) bash scripts/bench/gpu_host.sh $o ranks photos \
  > $o/ranks.out 2>&1; echo rc=$?
grep -a -v '^$' $o/ranks.out | grep -v nvjpeg2k | tail -30
echo wall $(( $(date +%s) - start )) s
