# call 1 (2 GPUs): issue #21 on 500x375 with today's loader: exactly once over 2 ranks (one
# .tgz, 2 epochs; 16 shards), resume cut under 2 ranks, then ResNet-18 and -50 fed and data-on-GPU,
# 1 GPU and 2, every flag at its default (STEPS_AS=default: no step flag given)
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call1; mkdir -p $o; start=$(date +%s)
nvidia-smi -L
STEPS_AS=default timeout 580 bash scripts/bench/gpu_host.sh $o ranks fixed > $o/ranks.out 2>&1
echo rc=$?
grep -a '^{\|^fixed\|Error\|error' $o/ranks.out | cut -c1-600
echo wall $(( $(date +%s) - start )) s
