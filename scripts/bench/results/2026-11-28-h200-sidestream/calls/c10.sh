# call 10: the headline benchmark on both data sets (loader alone, ResNet-18/50, decode auto and cpu)
export BENCH_DATA=.cache/bench-data
o=$OUT/call10; mkdir -p $o
start=$(date +%s)
timeout 570 bash scripts/bench/gpu_host.sh $o bench > $o/bench.out 2>&1; echo rc=$?
grep -a -v '^$' $o/bench.out | grep -v nvjpeg2k | tail -70
echo wall $(( $(date +%s) - start )) s
