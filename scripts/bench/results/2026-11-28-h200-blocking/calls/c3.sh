# call 3: which other thread's call ends as the training thread's long launches end (fed photos, lanes hw and default); tests [r-z]
export BENCH_DATA=.cache/bench-data
o=$OUT/call3; mkdir -p $o
timeout 200 bash scripts/bench/gpu_host.sh $o profile photos > $o/profile.out 2>&1; echo rc=$?
grep -a -v '^$' $o/profile.out | grep -v 'nvjpeg2k\|nvtiff' | tail -60
rm -f $o/trace-*.json.gz
timeout 300 bash scripts/bench/gpu_host.sh $o tests tests/test_[r-z]*.py > $o/tests.out 2>&1; echo rc=$?
tail -12 $o/tests.out
