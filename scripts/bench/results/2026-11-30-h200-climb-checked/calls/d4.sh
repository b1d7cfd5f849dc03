# call 4 (warm after call 3): the GPU decoders' and nvbatch's tests whole, after the climb
o=$OUT/call4; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
el "tests/test_[gn]*.py"
timeout 420 bash scripts/bench/gpu_host.sh $o tests tests/test_[gn]*.py 2>&1 | tail -4
grep -a -E "FAILED|Error" $o/pytest.log | head -10
el done
