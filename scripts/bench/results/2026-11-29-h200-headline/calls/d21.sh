# session 27, call 21 (one H200, warm): DALI beside ours on 500x375 (README's headline command)
export BENCH_DATA=.cache/bench-data
start=$(date +%s)
timeout 570 bash scripts/bench/gpu_host.sh $OUT/call21 dali fixed 2>&1 | tail -30
echo wall $(( $(date +%s) - start )) s
