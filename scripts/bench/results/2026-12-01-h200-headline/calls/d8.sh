# call 8 (H200, warm): DALI beside ours on 500x375 (README's headline command)
export BENCH_DATA=.cache/bench-data; start=$(date +%s)
echo "tree: $(cat .cache/calls/TREE)"
timeout 570 bash scripts/bench/gpu_host.sh $OUT/call8 dali fixed 2>&1 | tail -30
echo wall $(( $(date +%s) - start )) s
