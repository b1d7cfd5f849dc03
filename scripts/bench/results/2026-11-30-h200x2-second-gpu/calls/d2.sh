# call 2 (2-GPU host): nvImageCodec imported with the device current — the second-GPU test
# for each decoder and the probe again, then the first part of the whole suite
o=$OUT/call2; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
echo "tree: $(cat .cache/calls/TREE)"; nvidia-smi -L
timeout 150 bash scripts/bench/gpu_host.sh $o/a tests tests/test_prefetch.py -k "second_gpu" -v \
  2>&1 | tail -1
grep -a -E "PASSED|FAILED|SKIPPED|^E " $o/a/pytest.log | cut -c1-160 | head -12
el probe
PYTHONPATH=$PWD/.cache/site:$PWD timeout 120 python3 scripts/bench/probe_second_gpu.py \
  --out $o/probe.jsonl 2>&1 | tail -12
el "tests [gn]"
timeout 400 bash scripts/bench/gpu_host.sh $o/b tests tests/test_[gn]*.py 2>&1 | tail -1
grep -a -E "FAILED|^E " $o/b/pytest.log | cut -c1-160 | head -12
el done
