# call 9 (2 GPUs, GPU 0 for the traces): fed ResNet-18's steps 40-44 as replays at most one
# step ahead (trace), then a second round of call 8's rows in the reverse order
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call9; mkdir -p $o/ahead1
start=$(date +%s)
CUDA_VISIBLE_DEVICES=0 TRAIN_FLAGS="--cuda-graph --graph-ahead 1" PROFILE_RUNS="ceiling two" \
  timeout 170 bash scripts/bench/gpu_host.sh $o/ahead1 profile photos > $o/ahead1/profile.out 2>&1
echo profile rc=$?
grep -a -v '^$' $o/ahead1/profile.out | grep -v nvjpeg2k | tail -40
echo "== ranks at $(( $(date +%s) - start )) s"
CHECKS=0 ARCHS=resnet18 FEEDS=loader STEPS_AS="graph eager graph:0 graph:1" \
  timeout $(( 560 - ($(date +%s) - start) )) bash scripts/bench/gpu_host.sh $o ranks photos \
  > $o/ranks.out 2>&1; echo rc=$?
grep -a -v '^$' $o/ranks.out | grep -v nvjpeg2k | tail -30
echo wall $(( $(date +%s) - start )) s
