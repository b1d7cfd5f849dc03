# call 9: steps on a side stream wait for data: what the loader beside them lacks (photos)
export BENCH_DATA=.cache/bench-data
o=$OUT/call9; mkdir -p $o
git log --oneline -1
start=$(date +%s)
timeout 560 bash scripts/bench/gpu_host.sh $o sidestream photos > $o/sidestream.out 2>&1; echo rc=$?
grep -a -v '^$' $o/sidestream.out | grep -v nvjpeg2k | tail -60
echo wall $(( $(date +%s) - start )) s
