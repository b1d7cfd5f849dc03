# call 7 (one H200): traces of fed ResNet-18's steps 40-44 on photos, --cuda-graph replays then eager
export BENCH_DATA=.cache/bench-data
o=$OUT/call7; mkdir -p $o/graph $o/eager
start=$(date +%s)
TRAIN_FLAGS=--cuda-graph PROFILE_RUNS="ceiling two" timeout 150 bash scripts/bench/gpu_host.sh $o/graph profile photos \
  > $o/graph/profile.out 2>&1; echo rc=$?
grep -a -v '^$' $o/graph/profile.out | grep -v nvjpeg2k | tail -40
echo "== eager at $(( $(date +%s) - start )) s"
PROFILE_RUNS="ceiling two" timeout $(( 260 - ($(date +%s) - start) )) bash scripts/bench/gpu_host.sh $o/eager profile photos \
  > $o/eager/profile.out 2>&1; echo rc=$?
grep -a -v '^$' $o/eager/profile.out | grep -v nvjpeg2k | tail -40
echo wall $(( $(date +%s) - start )) s
