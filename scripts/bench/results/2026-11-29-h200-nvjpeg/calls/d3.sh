# call 3 (one H200): the probe again, its direct rows with
# chroma replicated as the loader decodes (call 2: direct with interpolation 4,500 img/s on
# photos, 42,900 on 500x375 with pools; its pixels within 1 of PIL), then its CUDA test.
o=$OUT/call3; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
export BENCH_DATA=.cache/bench-data
el "probe nvjpeg, photos"
timeout 200 bash scripts/bench/gpu_host.sh $o/a nvjpeg photos 2>&1 | grep -v "^$" | tail -14
el "probe nvjpeg, fixed"
timeout 150 bash scripts/bench/gpu_host.sh $o/b nvjpeg fixed 2>&1 | grep -v "^$" | tail -12
export PYTHONPATH="$PWD/.cache/site:$PWD"
el "probe's CUDA test"
timeout 90 python3 -m pytest -q -x tests/test_scripts.py -k "probe_nvjpeg" 2>&1 | tail -25
el done
