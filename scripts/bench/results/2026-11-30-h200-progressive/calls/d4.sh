# call 4 (same H200, warm): the new tests of the in-call fallback, alone
o=$OUT/call4; mkdir -p $o
timeout 115 bash scripts/bench/gpu_host.sh $o tests tests/test_gpudecode.py -k "refuse or fallbacks" 2>&1 | tail -3
