# call 2 (2 GPUs): issue #21 on photos, as call 1 on 500x375 (no rank checks here)
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call2; mkdir -p $o; start=$(date +%s)
nvidia-smi -L
STEPS_AS=default timeout 580 bash scripts/bench/gpu_host.sh $o ranks photos > $o/ranks.out 2>&1
echo rc=$?
grep -a '^{\|^photos\|Error\|error' $o/ranks.out | cut -c1-600
echo wall $(( $(date +%s) - start )) s
