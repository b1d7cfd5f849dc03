# call 32 (one H200): the whole suite, second part (tests/test_[a-fh-mp]*.py)
o=$OUT/call32; mkdir -p $o
bash scripts/bench/gpu_host.sh $o/am tests tests/test_[a-fh-mp]*.py 2>&1 | tail -3
