# session 27, call 24 (one H200, fresh): wheels installed, the 500x375 archive of the `dali` part made
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
start=$(date +%s)
bash scripts/bench/gpu_host.sh $OUT/call24 none 2>&1 | tail -3
python3 scripts/bench/make_imagenet_like.py --sizes fixed --images 16000 --out $BENCH_DATA/fixed-16000.tgz 2>&1 | tail -1
echo wall $(( $(date +%s) - start )) s
