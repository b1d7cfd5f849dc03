# session 27, call 23 (one H200, fresh): the engines beside the packers decoding the large photos
# (Options.cpu_large, Pillow's DCT scaling) on today's tree, where the loader alone runs at the
# engines' ceiling: loader alone, ResNet-18, ResNet-50, rows none / 3 MP / 2 MP
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call23; mkdir -p $o; start=$(date +%s)
bash scripts/bench/gpu_host.sh $o none 2>&1 | tail -3
python3 scripts/bench/make_imagenet_like.py --sizes photos --images 16000 --out $BENCH_DATA/photos-16000.tgz 2>&1 | tail -1
CPU_LARGE="none,3000000,2000000" LANES=auto STEPS=200 WINDOW=8 \
  timeout $(( 560 - ($(date +%s) - start) )) bash scripts/bench/gpu_host.sh $o lanes photos 2>&1 | tail -40
echo wall $(( $(date +%s) - start )) s
