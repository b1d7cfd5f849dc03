# call 2 (one H200): the probe again, with nvJPEG's memory pools as a row, the thread's CPU per
# batch, and both decoders' first batch against PIL (call 1: direct 4,400 img/s on photos,
# 41,000 on 500x375, pixels unlike nvImageCodec's), then its CUDA test.
o=$OUT/call2; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
export BENCH_DATA=.cache/bench-data
el "probe nvjpeg, photos"
timeout 200 bash scripts/bench/gpu_host.sh $o/a nvjpeg photos 2>&1 | grep -v "^$" | tail -14
el "probe nvjpeg, fixed"
timeout 150 bash scripts/bench/gpu_host.sh $o/b nvjpeg fixed 2>&1 | grep -v "^$" | tail -11
export PYTHONPATH="$PWD/.cache/site:$PWD"
el "probe's CUDA test"
timeout 90 python3 -m pytest -q -x tests/test_scripts.py -k "probe_nvjpeg" 2>&1 | tail -25
el done
