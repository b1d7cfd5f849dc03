# call 6 (one H200): the suite's files around the change, CUDA tests included, on the final
# tree of this session (LargeOnCpu, StepLag, the packer's stamped threshold)
o=$OUT/call6; mkdir -p $o; start=$(date +%s)
timeout 170 bash scripts/bench/gpu_host.sh $o/t tests tests/test_prefetch.py tests/test_share.py \
  tests/test_batch.py tests/test_pool.py tests/test_epoch.py 2>&1 | tail -3
echo wall $(( $(date +%s) - start )) s
