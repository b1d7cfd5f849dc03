# call 7 (one H200, ~300 s left): would a lane of our own calling nvJPEG directly cost
# ResNet-18's steps less on 500x375, where it halves the decode call's host time (call 4)?
# The steps on data already on the GPU beside the default lanes alone, one direct lane, two.
o=$OUT/call7; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
export BENCH_DATA=.cache/bench-data
el "the probe's CUDA test (DirectLane against nvImageCodec's lane)"
bash scripts/bench/gpu_host.sh $o none > /dev/null 2>&1
PYTHONPATH="$PWD/.cache/site:$PWD" timeout 50 python3 -m pytest -q tests/test_scripts.py -k "probe_nvjpeg" 2>&1 | tail -2
el "ResNet-18 data on GPU beside lanes alone, 500x375"
SPECS="hw+hw nvjpeg nvjpeg+nvjpeg" timeout 170 bash scripts/bench/gpu_host.sh $o/t threads fixed 2>&1 | grep -a -v "^$" | tail -16
el done
