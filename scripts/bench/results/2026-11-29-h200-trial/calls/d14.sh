# call 14 (2 GPUs; for the next session): the 2-GPU test of the graph default, then ResNet-50
# on photos 1 and 2 GPUs, graphed (the default for DDP) and eager, fed and ceilings
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call14; mkdir -p $o
start=$(date +%s)
( python3 scripts/bench/make_imagenet_like.py --sizes photos --images 32000 --shards 0 \
    --out $BENCH_DATA/photos-32000.tgz 2>&1 | tail -1
  python3 scripts/bench/make_imagenet_like.py --images 1000 --seed 1 \
    --out $BENCH_DATA/val-1000.tgz 2>&1 | tail -1 ) > $o/gen.log &
timeout 150 bash scripts/bench/gpu_host.sh $o tests tests/test_train.py -k "graph" > $o/tests.out 2>&1
echo tests rc=$?; tail -6 $o/tests.out
wait; cat $o/gen.log
CHECKS=0 ARCHS=resnet50 STEPS_AS="graph eager" \
  timeout $(( 565 - ($(date +%s) - start) )) bash scripts/bench/gpu_host.sh $o ranks photos \
  > $o/ranks.out 2>&1; echo rc=$?
grep -a '^photos' $o/ranks.out
echo wall $(( $(date +%s) - start )) s
