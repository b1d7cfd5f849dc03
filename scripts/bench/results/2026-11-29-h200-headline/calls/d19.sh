# session 27, call 19 (one H200): wheels installed, the two 16,000-image archives of the `dali` part made
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
start=$(date +%s)
bash scripts/bench/gpu_host.sh $OUT/call19 none 2>&1 | tail -5
python3 scripts/bench/make_imagenet_like.py --sizes photos --images 16000 --out $BENCH_DATA/photos-16000.tgz 2>&1 | tail -1
python3 scripts/bench/make_imagenet_like.py --sizes fixed --images 16000 --out $BENCH_DATA/fixed-16000.tgz 2>&1 | tail -1
ls -la $BENCH_DATA
echo wall $(( $(date +%s) - start )) s
