# call 3 (one H200, fresh): branch exif-gpu. EXIF-rotated JPEGs now go to the GPU, read upright
# by the crops (they went to the packers' CPU path). Its CUDA tests, then the loader alone and
# ResNet-18 on photos of which 30% carry a phone camera's orientation: main's tree (.cache/base)
# against this one, interleaved
o=$OUT/call3; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
el "tests: orientation, every decoder and engine against the CPU path, crops, fallbacks"
timeout 230 bash scripts/bench/gpu_host.sh $o tests tests/test_gpudecode.py tests/test_scripts.py \
  -k "rotated or upright or every_gpu_decoder or each_nvimgcodec or crop_kernel or fallbacks or triton_and_roi or screening or make_imagenet" 2>&1 | tail -1
grep -a -E "FAILED|Error" $o/pytest.log | head -10
export BENCH_DATA=.cache/bench-exif; mkdir -p $BENCH_DATA
el "archive: photos, 30% with EXIF orientations"
python3 scripts/bench/make_imagenet_like.py --sizes photos --images 16000 --exif-share 0.3 \
  --out $BENCH_DATA/photos-16000.tgz | tail -1
el "loader alone: main vs this"
BASE=.cache/base ROUNDS=1 WINDOW=8 timeout 120 \
  bash scripts/bench/gpu_host.sh $o/v versus photos 2>&1 | grep -a "round"
el "ResNet-18 fed: main vs this"
BASE=.cache/base MODELS=resnet18 WARMUP=300 WINDOW=6 ARGS="--step-priority -1" ROUNDS=1 \
  timeout 150 bash scripts/bench/gpu_host.sh $o/v2 versus photos 2>&1 | grep -a "round"
el done
