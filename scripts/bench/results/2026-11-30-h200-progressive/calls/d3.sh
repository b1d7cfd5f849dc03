# call 3 (one H200, fresh): IMAGELOADER_GPU_PROGRESSIVE=1 now also gives the engines' lanes a
# fallback backend in the same call (nvbatch.c: hw, then hybrid for what the engines refuse,
# in the decoder's threads while the engines decode the rest), instead of a second call after
# the batch. Tests; then switch off (base) against on (this), same tree, interleaved: plain
# photos (1% progressive) and photos with 30% progressive, the loader alone and ResNet-18 fed
o=$OUT/call3; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
el "tests: nvbatch, refusals in one call and after it, fallbacks, each engine"
timeout 170 bash scripts/bench/gpu_host.sh $o tests tests/test_nvbatch.py tests/test_gpudecode.py \
  -k "nvbatch or refuse or fallbacks or each_nvimgcodec or screening" 2>&1 | tail -1
grep -a -E "FAILED|Error" $o/pytest.log | head -10
export BENCH_DATA=.cache/bench-plain; mkdir -p $BENCH_DATA
el "plain photos (1% progressive), loader alone: off vs on"
BASE=. THIS_ENV=IMAGELOADER_GPU_PROGRESSIVE=1 ROUNDS=1 WINDOW=8 timeout 110 \
  bash scripts/bench/gpu_host.sh $o/v1 versus photos 2>&1 | grep -a "round"
el "plain photos, ResNet-18 fed: off vs on"
BASE=. THIS_ENV=IMAGELOADER_GPU_PROGRESSIVE=1 MODELS=resnet18 WARMUP=300 WINDOW=6 \
  ARGS="--step-priority -1" ROUNDS=1 timeout 110 \
  bash scripts/bench/gpu_host.sh $o/v2 versus photos 2>&1 | grep -a "round"
export BENCH_DATA=.cache/bench-prog; mkdir -p $BENCH_DATA
el "photos, 30% progressive, loader alone: off vs on"
python3 scripts/bench/make_imagenet_like.py --sizes photos --images 16000 --progressive-share 0.3 \
  --out $BENCH_DATA/photos-16000.tgz | tail -1
BASE=. THIS_ENV=IMAGELOADER_GPU_PROGRESSIVE=1 ROUNDS=1 WINDOW=8 timeout 100 \
  bash scripts/bench/gpu_host.sh $o/v3 versus photos 2>&1 | grep -a "round"
el "photos, 30% progressive, ResNet-18 fed: off vs on"
BASE=. THIS_ENV=IMAGELOADER_GPU_PROGRESSIVE=1 MODELS=resnet18 WARMUP=300 WINDOW=6 \
  ARGS="--step-priority -1" ROUNDS=1 timeout 130 \
  bash scripts/bench/gpu_host.sh $o/v4 versus photos 2>&1 | grep -a "round"
el done
