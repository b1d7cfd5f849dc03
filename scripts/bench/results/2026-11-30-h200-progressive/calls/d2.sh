# call 2 (one H200, fresh): the same switch (IMAGELOADER_GPU_PROGRESSIVE=1, "this") under
# decode="auto" (the default: 16 packers) and under "cuda" with 16 packers, on photos with 30%
# progressive; then ResNet-18 fed under "auto"
o=$OUT/call2; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
export BENCH_DATA=.cache/bench-prog; mkdir -p $BENCH_DATA
el "archive: photos, 30% progressive"
python3 scripts/bench/make_imagenet_like.py --sizes photos --images 16000 --progressive-share 0.3 \
  --out $BENCH_DATA/photos-16000.tgz | tail -1
el "loader alone, decode=auto: packers' CPU (base) vs GPU (this)"
BASE=. THIS_ENV=IMAGELOADER_GPU_PROGRESSIVE=1 DECODE=auto WARMUP=200 ROUNDS=1 WINDOW=8 \
  timeout 150 bash scripts/bench/gpu_host.sh $o/v versus photos 2>&1 | grep -a "round"
el "loader alone, decode=cuda with 16 packers: base vs this"
BASE=. THIS_ENV=IMAGELOADER_GPU_PROGRESSIVE=1 ARGS="--workers 16" ROUNDS=1 WINDOW=8 \
  timeout 120 bash scripts/bench/gpu_host.sh $o/v2 versus photos 2>&1 | grep -a "round"
el "ResNet-18 fed, decode=auto: base vs this"
BASE=. THIS_ENV=IMAGELOADER_GPU_PROGRESSIVE=1 DECODE=auto MODELS=resnet18 WARMUP=300 WINDOW=6 \
  ARGS="--step-priority -1" ROUNDS=1 timeout 200 \
  bash scripts/bench/gpu_host.sh $o/v3 versus photos 2>&1 | grep -a "round"
el done
