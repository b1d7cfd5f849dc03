# call 5 (2 GPUs): a second round of ResNet-18 fed on 500x375, --cuda-graph then eager, 1 and 2 GPUs
export BENCH_DATA=.cache/bench-data
o=$OUT/call5; mkdir -p $o
start=$(date +%s)
CHECKS=0 ARCHS=resnet18 FEEDS=loader STEPS_AS="graph eager" timeout 400 bash scripts/bench/gpu_host.sh $o ranks fixed \
  > $o/ranks.out 2>&1; echo rc=$?
grep -a -v '^$' $o/ranks.out | grep -v nvjpeg2k | tail -20
echo wall $(( $(date +%s) - start )) s
