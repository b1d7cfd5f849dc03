# call 17 (one GPU): the trial's warm-up (TRIAL_WARMUP) and its stricter cannot-win rule: their
# tests on the GPU, then ResNet-50 fed and its ceiling, 1 GPU, graphed and eager, on photos and
# 500x375: does the second epoch still pay a CPU turn?
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call17; mkdir -p $o
start=$(date +%s)
( python3 scripts/bench/make_imagenet_like.py --sizes photos --images 32000 --shards 0 \
    --out $BENCH_DATA/photos-32000.tgz 2>&1 | tail -1
  python3 scripts/bench/make_imagenet_like.py --sizes fixed --images 32000 --shards 0 \
    --out $BENCH_DATA/fixed-32000.tgz 2>&1 | tail -1
  python3 scripts/bench/make_imagenet_like.py --images 1000 --seed 1 \
    --out $BENCH_DATA/val-1000.tgz 2>&1 | tail -1 ) > $o/gen.log &
timeout 150 bash scripts/bench/gpu_host.sh $o tests tests/test_share.py tests/test_gpudecode.py \
  -k "share or auto_decode or trial" > $o/tests.out 2>&1
echo tests rc=$?; tail -3 $o/tests.out
wait; cat $o/gen.log
for kind in photos fixed; do
  CHECKS=0 ARCHS=resnet50 GPUS=1 STEPS_AS="graph eager" \
    timeout $(( 470 - ($(date +%s) - start) )) bash scripts/bench/gpu_host.sh $o ranks $kind \
    > $o/ranks-$kind.out 2>&1; echo rc=$?
  grep -a "^$kind" $o/ranks-$kind.out
done
echo wall $(( $(date +%s) - start )) s
