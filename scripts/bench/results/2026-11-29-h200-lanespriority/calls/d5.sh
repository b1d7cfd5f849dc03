# call 5 (one H200): the change (the loader's streams most urgent by default): test_prefetch.py
# and test_gpujpeg.py whole (the split lane's helper stream), test_train.py's training-stream tests.
o=$OUT/call5; mkdir -p $o; start=$(date +%s)
timeout 170 bash scripts/bench/gpu_host.sh $o/t tests tests/test_prefetch.py tests/test_gpujpeg.py 2>&1 | tail -2
echo "tests at $(( $(date +%s) - start )) s"
timeout $(( 260 - ($(date +%s) - start) )) bash scripts/bench/gpu_host.sh $o/s tests tests/test_train.py -k stream 2>&1 | tail -2
echo "tests at $(( $(date +%s) - start )) s"
