# call 5 (fresh H200, the session's last device seconds): the final tree's camera and
# arithmetic JPEG tests with CUDA (the frame walk's last change), and the copy's error names
o=$OUT/call5; mkdir -p $o
echo "tree: $(cat .cache/calls/TREE)"
timeout 150 bash scripts/bench/gpu_host.sh $o tests tests/test_gpudecode.py tests/test_cache.py \
  -k "screening or arithmetic or camera or name" 2>&1 | tail -1
grep -a -E "FAILED|ERROR" $o/pytest.log | head -10
