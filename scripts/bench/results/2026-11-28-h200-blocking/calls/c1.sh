# call 1: how uneven ResNet-18's fed steps are on one H200 (photos), and what evens them
export BENCH_DATA=.cache/bench-data
o=$OUT/call1; mkdir -p $o
git log --oneline -1
timeout 560 bash scripts/bench/gpu_host.sh $o spread photos > $o/spread.out 2>&1; echo rc=$?
grep -a -v '^$' $o/spread.out | tail -60
