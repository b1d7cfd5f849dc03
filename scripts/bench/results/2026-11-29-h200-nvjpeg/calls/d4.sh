# call 4 (one H200): the probe with the call's host time fitted per image, KB and MP (batches
# of one subsampling by size), and the images whose pixels differ most listed (call 3: on
# photos 5 of 256 differ from nvImageCodec's by up to 255, 8 from PIL's when interpolated).
o=$OUT/call4; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
export BENCH_DATA=.cache/bench-data
el "probe nvjpeg, photos"
timeout 200 bash scripts/bench/gpu_host.sh $o/a nvjpeg photos 2>&1 | grep -v "^$" | tail -16
el "probe nvjpeg, fixed"
timeout 150 bash scripts/bench/gpu_host.sh $o/b nvjpeg fixed 2>&1 | grep -v "^$" | tail -14
el done
