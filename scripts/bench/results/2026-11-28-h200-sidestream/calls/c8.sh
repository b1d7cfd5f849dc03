# call 8: how uneven fed ResNet-18's steps are, now with a side-stream row (photos)
export BENCH_DATA=.cache/bench-data
o=$OUT/call8; mkdir -p $o
git log --oneline -1
start=$(date +%s)
timeout 580 bash scripts/bench/gpu_host.sh $o spread photos > $o/spread.out 2>&1; echo rc=$?
grep -a -v '^$' $o/spread.out | grep -v nvjpeg2k | tail -60
echo wall $(( $(date +%s) - start )) s
