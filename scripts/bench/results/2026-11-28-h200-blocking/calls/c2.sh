# call 2: where ResNet-18's fed steps go with today's default lanes (profile), then the GPU decoder tests
export BENCH_DATA=.cache/bench-data
o=$OUT/call2; mkdir -p $o
timeout 250 bash scripts/bench/gpu_host.sh $o profile photos > $o/profile.out 2>&1; echo rc=$?
grep -a -v '^$' $o/profile.out | grep -v 'nvjpeg2k\|nvtiff' | tail -30
timeout 320 bash scripts/bench/gpu_host.sh $o tests tests/test_g*.py tests/test_n*.py > $o/tests.out 2>&1; echo rc=$?
tail -30 $o/tests.out
