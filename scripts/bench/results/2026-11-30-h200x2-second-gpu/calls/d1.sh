# call 1 (2-GPU host): where a loader on cuda:1 with nvImageCodec lands on GPU 0 — the probe
# without and with --set-device, then the second-GPU test for each decoder
o=$OUT/call1; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
echo "tree: $(cat .cache/calls/TREE)"; nvidia-smi -L
timeout 200 bash scripts/bench/gpu_host.sh $o/a tests tests/test_prefetch.py -k "second_gpu" -v \
  2>&1 | tail -1
grep -a -E "PASSED|FAILED|SKIPPED|^E " $o/a/pytest.log | cut -c1-160 | head -12
export PYTHONPATH=$PWD/.cache/site:$PWD
el probe
timeout 170 python3 scripts/bench/probe_second_gpu.py --out $o/probe.jsonl 2>&1 | tail -12
el "probe --set-device"
timeout 170 python3 scripts/bench/probe_second_gpu.py --set-device --out $o/probe-set.jsonl 2>&1 | tail -12
el done
