# call 33 (one H200): the whole suite, third part (tests/test_[oq-z]*.py)
o=$OUT/call33; mkdir -p $o
bash scripts/bench/gpu_host.sh $o/rz tests tests/test_[oq-z]*.py 2>&1 | tail -3
