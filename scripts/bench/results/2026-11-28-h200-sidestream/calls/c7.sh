# call 7: the side-stream CUDA test, then where fed ResNet-18's training thread waits on each stream
export BENCH_DATA=.cache/bench-data
o=$OUT/call7; mkdir -p $o
git log --oneline -1
start=$(date +%s)
timeout 120 bash scripts/bench/gpu_host.sh $o tests tests/test_train.py -k stream > $o/tests.out 2>&1; echo tests rc=$?
tail -8 $o/tests.out
timeout 420 bash scripts/bench/gpu_host.sh $o blocking photos > $o/blocking.out 2>&1; echo blocking rc=$?
grep -a -v '^$' $o/blocking.out | grep -v nvjpeg2k | tail -60
echo wall $(( $(date +%s) - start )) s
