# call 2 (fresh H200): the screen's end-marker check on CUDA (cut JPEGs skipped as truncated on
# both paths; the tests that now use a bogus Huffman table), the probe again (that case added),
# then the loader alone on photos: the tree before session 43 (.cache/base, 060d0ef: no frame
# walk, no RGB or end-marker checks) against this one, two rounds
o=$OUT/call2; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
echo "tree: $(cat .cache/calls/TREE)"
el "tests"
timeout 240 bash scripts/bench/gpu_host.sh $o tests tests/test_gpudecode.py \
  -k "cut or probe_times or drop_last or screening or rgb or camera or arithmetic" 2>&1 | tail -1
grep -a -E "FAILED|ERROR" $o/pytest.log | head -12
export PYTHONPATH=$PWD/.cache/site:$PWD
el "probe_codings"
timeout 100 python3 scripts/bench/probe_codings.py --out $o/codings.json 2>&1 \
  | grep -v "nvtiff\|nvjpeg2k\|Note:\|ERROR" | grep -A7 "bogus\|^cut at 90"
el "photos loader alone: before session 43 (base) vs now (this)"
BASE=.cache/base ROUNDS=2 WINDOW=8 timeout 280 bash scripts/bench/gpu_host.sh $o/vphotos versus photos \
  2>&1 | grep -a "round"
el done
