# call 7 (H200, warm): DALI's last piece; its wheels joined and installed; DALI beside ours on
# photos (README's headline command)
export BENCH_DATA=.cache/bench-data; start=$(date +%s)
echo "tree: $(cat .cache/calls/TREE)"
timeout 570 bash scripts/bench/gpu_host.sh $OUT/call7 dali photos 2>&1 | tail -30
echo wall $(( $(date +%s) - start )) s
