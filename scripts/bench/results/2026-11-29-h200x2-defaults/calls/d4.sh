# call 4 (2 GPUs): ResNet-18 on photos again, 2 GPUs before 1 this time (a second round of
# call 2's rows, the order reversed)
export BENCH_DATA=.cache/bench-data
o=$OUT/call4; mkdir -p $o; start=$(date +%s)
STEPS_AS=default ARCHS=resnet18 GPUS="2 1" timeout 400 bash scripts/bench/gpu_host.sh $o ranks photos \
  > $o/ranks.out 2>&1; echo rc=$?
grep -a '^photos\|Error\|error' $o/ranks.out | cut -c1-600
echo wall $(( $(date +%s) - start )) s
