# call 1 (one H200, fresh): the GPU decoders' and nvbatch's tests whole (owed since bd_create
# gained its fallback and gpucrop's orientation lookup); then plain photos (1% progressive),
# the loader alone: progressive JPEGs by the packers against the GPU for those under 0.5 MP
o=$OUT/call1; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
el "tests/test_[gn]*.py"
timeout 340 bash scripts/bench/gpu_host.sh $o tests tests/test_[gn]*.py 2>&1 | tail -1
grep -a -E "FAILED|Error" $o/pytest.log | head -10
tail -3 $o/pytest.log
el "plain photos (1% progressive), loader alone: packers vs GPU under 0.5 MP"
SHARE=0.01 PROGRESSIVE=500000 WINDOW=8 timeout 190 bash scripts/bench/gpu_host.sh $o/p01 progressive 2>&1 | grep -a "round"
el done
