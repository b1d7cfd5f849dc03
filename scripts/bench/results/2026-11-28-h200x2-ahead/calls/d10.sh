# call 10 (2 GPUs): the data-on-GPU ceilings of replays at most 0 steps ahead on photos; then
# on 500x375 ResNet-18 1 and 2 GPUs: replays 0 ahead, eager, unbounded, each fed and its ceiling
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call10; mkdir -p $o
start=$(date +%s)
( python3 scripts/bench/make_imagenet_like.py --sizes fixed --images 32000 --shards 0 \
    --out $BENCH_DATA/fixed-32000.tgz 2>&1 | tail -1 ) > $o/gen.log  # first: it takes every core
CHECKS=0 ARCHS=resnet18 FEEDS=data-on-gpu STEPS_AS="graph:0 graph eager" \
  timeout 180 bash scripts/bench/gpu_host.sh $o ranks photos > $o/ranks-photos.out 2>&1; echo rc=$?
grep -a '^photos' $o/ranks-photos.out
cat $o/gen.log
echo "== fixed at $(( $(date +%s) - start )) s"
CHECKS=0 ARCHS=resnet18 STEPS_AS="graph:0 eager graph" \
  timeout $(( 565 - ($(date +%s) - start) )) bash scripts/bench/gpu_host.sh $o ranks fixed \
  > $o/ranks.out 2>&1; echo rc=$?
grep -a '^fixed' $o/ranks.out
echo wall $(( $(date +%s) - start )) s
