# call 2 (one H200, warm after call 1): call 1's tests again, with time to finish (call 1's
# 280-s limit cut them at 62%, none failed by then).
o=$OUT/call2; mkdir -p $o; start=$(date +%s); timeout 500 bash scripts/bench/gpu_host.sh $o/t tests tests/test_nvbatch.py tests/test_gpudecode.py 2>&1 | tail -3; echo "tests at $(( $(date +%s) - start )) s"
