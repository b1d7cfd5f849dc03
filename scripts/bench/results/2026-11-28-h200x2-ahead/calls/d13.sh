# call 13 (one H200): fed ResNet-18's steps 40-44 on photos as replays at most 0 steps ahead
# (the new default of --cuda-graph): do the driver waits of calls 7 and 9 go?
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call13; mkdir -p $o/ahead0
start=$(date +%s)
TRAIN_FLAGS="--cuda-graph --graph-ahead 0" PROFILE_RUNS="ceiling two" \
  timeout 230 bash scripts/bench/gpu_host.sh $o/ahead0 profile photos > $o/ahead0/profile.out 2>&1
echo profile rc=$?
rm -f $o/ahead0/trace-photos-ceiling.json.gz
grep -a -v '^$' $o/ahead0/profile.out | grep -v nvjpeg2k | grep -v 'rgba2rgb\|^      ' | tail -40
echo wall $(( $(date +%s) - start )) s
