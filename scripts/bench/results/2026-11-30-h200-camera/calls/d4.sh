# call 4 (warm, right after call 3): the rest of the suite, [r-z], with CUDA
o=$OUT/call4; mkdir -p $o
echo "tree: $(cat .cache/calls/TREE)"
timeout 380 bash scripts/bench/gpu_host.sh $o tests tests/test_[r-z]*.py 2>&1 | tail -1
grep -a -E "FAILED|ERROR" $o/pytest.log | head -20
