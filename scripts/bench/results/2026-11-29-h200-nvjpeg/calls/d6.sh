# call 6 (one H200, ~500 s left): the engines top out near 15-16k photos/s however they are fed
# (calls 3-5: one process 10.8k, two 13.0k, three 15.1k; in-process lanes 12.3k/14.7k/15.9k).
# Does a CUDA lane (Huffman on the GPU) beside two engine lanes raise the loader alone past them?
o=$OUT/call6; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
export BENCH_DATA=.cache/bench-data
bash scripts/bench/gpu_host.sh $o none > /dev/null 2>&1
export PYTHONPATH="$PWD/.cache/site:$PWD"
python3 scripts/bench/make_imagenet_like.py --sizes photos --images 16000 --out $BENCH_DATA/photos-16000.tgz | tail -1
for lanes in hw+hw hw+hw+cuda:4 hw+hw+hw hw+hw+cuda:8 hw+hw; do
  el "loader alone, photos, lanes $lanes"
  timeout 45 python3 scripts/bench/bench.py --archive $BENCH_DATA/photos-16000.tgz --shards 0 --models= \
    --recipes loader --decode cuda --warmup 100 --steps 100000 --max-seconds 8 --gpu-lanes $lanes \
    --out $o/loader-$lanes.json 2>&1 | grep -a "^loader\|^ *loader\|img/s" | tail -2
done
el done
