# call 15 (2 GPUs): ResNet-50 on 500x375, 1 and 2 GPUs, graphed (the DDP default) and eager,
# fed and ceilings
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call15; mkdir -p $o
start=$(date +%s)
( python3 scripts/bench/make_imagenet_like.py --sizes fixed --images 32000 --shards 0 \
    --out $BENCH_DATA/fixed-32000.tgz 2>&1 | tail -1
  python3 scripts/bench/make_imagenet_like.py --images 1000 --seed 1 \
    --out $BENCH_DATA/val-1000.tgz 2>&1 | tail -1 ) > $o/gen.log
cat $o/gen.log
CHECKS=0 ARCHS=resnet50 STEPS_AS="graph eager" \
  timeout $(( 570 - ($(date +%s) - start) )) bash scripts/bench/gpu_host.sh $o ranks fixed \
  > $o/ranks.out 2>&1; echo rc=$?
grep -a '^fixed' $o/ranks.out
echo wall $(( $(date +%s) - start )) s
