# call 3 (2-GPU host): the whole suite, part 2 of 3
o=$OUT/call3; mkdir -p $o
echo "tree: $(cat .cache/calls/TREE)"
timeout 560 bash scripts/bench/gpu_host.sh $o/a tests tests/test_[a-fh-mp]*.py 2>&1 | tail -1
grep -a -E "FAILED|^E " $o/a/pytest.log | cut -c1-160 | head -12
