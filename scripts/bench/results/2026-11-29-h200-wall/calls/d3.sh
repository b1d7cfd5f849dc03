# call 3 (one H200): where the loader alone stops on photos (14.2k img/s, regions from 1 MP no
# faster, call 2): the lanes' threads sampled by py-spy; one, two and three lanes of the engines;
# the decoders alone (one C call per batch, whole images against regions from 1 MP).
o=$OUT/call3; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
export BENCH_DATA=.cache/bench-data
el "py-spy over the loader alone, default lanes"
SPY_SECONDS=10 timeout 200 bash scripts/bench/gpu_host.sh $o/s spy photos 2>&1 | grep -v "^$" | head -60
export PYTHONPATH="$PWD/.cache/site:$PWD"
el "loader alone, one, two and three lanes of the engines"
timeout 120 python3 scripts/bench/bench.py --archive $BENCH_DATA/photos-16000.tgz --shards 0 --models= \
  --recipes loader --decode cuda --gpu-lanes hw,hw+hw,hw+hw+hw --warmup 100 --steps 100000 --max-seconds 8 \
  --out $o/lanes.json 2>&1 | grep -a "loader alone" | head -3
el "decoders alone, photos, 4096, whole images and regions from 1 MP"
timeout 150 python3 scripts/bench/bench_batch_call.py --archive $BENCH_DATA/photos-16000.tgz --images 4096 \
  --engine hw --regions-from 1000000 --out $o/batchcall.json 2>&1 | tail -8
el done
