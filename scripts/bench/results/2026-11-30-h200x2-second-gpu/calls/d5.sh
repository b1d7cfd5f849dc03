# call 5 (2-GPU host): the split changes' tests on the GPU host; the probe's CUDA-decoder case
o=$OUT/call5; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
echo "tree: $(cat .cache/calls/TREE)"
timeout 150 bash scripts/bench/gpu_host.sh $o/a tests tests/test_vocab.py tests/test_index.py \
  tests/test_remote.py 2>&1 | tail -1
grep -a -E "FAILED|^E " $o/a/pytest.log | cut -c1-160 | head -12
el probe
PYTHONPATH=$PWD/.cache/site:$PWD timeout 40 python3 scripts/bench/probe_second_gpu.py \
  --cases nvimgcodec-api-cuda --out $o/probe.jsonl 2>&1 | tail -3
el done
