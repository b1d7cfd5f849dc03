# call 1 (one H200): nvJPEG's engines called directly against nvImageCodec's one C call
# (probe_nvjpeg.py) on photos and on 500x375, its CUDA test, then which lane decode calls are
# the slow ones beside ResNet-18 (bench.py --decode-calls).
o=$OUT/call1; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
export BENCH_DATA=.cache/bench-data
el "probe nvjpeg, photos"
timeout 200 bash scripts/bench/gpu_host.sh $o/a nvjpeg photos 2>&1 | grep -v "^$" | tail -16
el "probe nvjpeg, fixed"
timeout 150 bash scripts/bench/gpu_host.sh $o/b nvjpeg fixed 2>&1 | grep -v "^$" | tail -16
export PYTHONPATH="$PWD/.cache/site:$PWD"
el "probe's CUDA test"
timeout 90 python3 -m pytest -q -x tests/test_scripts.py -k "probe_nvjpeg or decode_call" 2>&1 | tail -4
el "decode calls beside ResNet-18"
timeout 70 python3 scripts/bench/bench.py --archive $BENCH_DATA/photos-16000.tgz --shards 0 --models resnet18 \
  --recipes ours --decode cuda --warmup 300 --steps 3000 --max-seconds 6 --step-priority -1 \
  --decode-calls --out $o/calls.json 2>&1 | grep -a -v "^$" | tail -24
el done
