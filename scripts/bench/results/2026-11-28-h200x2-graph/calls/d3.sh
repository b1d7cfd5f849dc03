# call 3 (2 GPUs): ResNet-18 on 500x375 (lighter decoding), 1 and 2 GPUs, eager steps and --cuda-graph replays
export BENCH_DATA=.cache/bench-data
o=$OUT/call3; mkdir -p $o
start=$(date +%s)
CHECKS=0 ARCHS=resnet18 STEPS_AS="eager graph" timeout 570 bash scripts/bench/gpu_host.sh $o ranks fixed \
  > $o/ranks.out 2>&1; echo rc=$?
grep -a -v '^$' $o/ranks.out | grep -v nvjpeg2k | tail -40
echo wall $(( $(date +%s) - start )) s
