# call 4 (H200, warm): DALI's second piece carried; the tests of what reads beside the changed
# reader (plain copies, epochs, faults' exactly-once, shares, summary)
o=$OUT/call4; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
echo "tree: $(cat .cache/calls/TREE)"; ls -la .cache/dali/*/
timeout 250 bash scripts/bench/gpu_host.sh $o/t tests tests/test_cache.py tests/test_epoch.py \
  tests/test_share.py tests/test_summary.py tests/test_faults.py 2>&1 | tail -4
el done
