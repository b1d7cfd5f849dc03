# call 1 (H200): session 46's hot-path additions (the reader's per-member split check, the
# lossless check before draft) against the tree before session 43 (.cache/base, 060d0ef), the
# loader alone, interleaved, two rounds, on photos and on 500x375; then the decode tests
o=$OUT/call1; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
echo "tree: $(cat .cache/calls/TREE)"; nvidia-smi -L
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
el "photos loader alone: base vs this"
BASE=.cache/base ROUNDS=2 WINDOW=8 timeout 260 bash scripts/bench/gpu_host.sh $o/vphotos versus photos \
  2>&1 | grep -a "round"
el "500x375 loader alone: base vs this"
BASE=.cache/base ROUNDS=2 WINDOW=8 timeout 220 bash scripts/bench/gpu_host.sh $o/vfixed versus fixed \
  2>&1 | grep -a "round"
el "decode tests"
timeout 90 bash scripts/bench/gpu_host.sh $o/t tests tests/test_decode.py 2>&1 | tail -1
el done
