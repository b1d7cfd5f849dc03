# session 27, call 20 (one H200, warm): DALI beside ours on photos (README's headline command)
export BENCH_DATA=.cache/bench-data
start=$(date +%s)
timeout 570 bash scripts/bench/gpu_host.sh $OUT/call20 dali photos 2>&1 | tail -30
echo wall $(( $(date +%s) - start )) s
