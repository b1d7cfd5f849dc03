# call 3 (H200, warm): DALI's first piece carried; the loader, train, decode tests and the
# GPU screen's test (lossless JPEGs)
o=$OUT/call3; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
echo "tree: $(cat .cache/calls/TREE)"; ls -la .cache/dali/*/
timeout 330 bash scripts/bench/gpu_host.sh $o/t tests tests/test_loader.py tests/test_train.py \
  tests/test_decode.py "tests/test_gpudecode.py::test_screening_leaves_arithmetic_and_lossless_jpegs_to_the_cpu" \
  2>&1 | tail -4
el done
