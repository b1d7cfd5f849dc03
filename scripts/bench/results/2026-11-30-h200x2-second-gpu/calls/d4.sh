# call 4 (2-GPU host): the whole suite, part 3 of 3
o=$OUT/call4; mkdir -p $o
echo "tree: $(cat .cache/calls/TREE)"
timeout 560 bash scripts/bench/gpu_host.sh $o/a tests tests/test_[r-z]*.py 2>&1 | tail -1
grep -a -E "FAILED|^E " $o/a/pytest.log | cut -c1-160 | head -12
