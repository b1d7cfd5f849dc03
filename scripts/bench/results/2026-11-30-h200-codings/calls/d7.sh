# call 7 (fresh H200, the last device seconds): call 6's one failure again after the fix
# (torchvision's decoder, no wheels carried but rapidgzip and isal: the lane thread's
# catch_warnings lost the epoch's skip warning), and the two new thread tests
o=$OUT/call7; mkdir -p $o
echo "tree: $(cat .cache/calls/TREE)"
timeout 120 bash scripts/bench/gpu_host.sh $o tests tests/test_index.py tests/test_gpujpeg.py \
  tests/test_decode.py -k "regions_feed_the_gpu or lane_thread or another_thread" 2>&1 | tail -1
grep -a -E "FAILED|ERROR" $o/pytest.log | head -10
