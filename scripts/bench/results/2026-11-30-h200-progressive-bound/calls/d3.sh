# call 3 (one H200, warm after call 2 if it can): plain photos, ResNet-18 fed, packers against
# the GPU under 0.5 MP, two more rounds (call 2's one round: -3.1%); then the EXIF change's
# owed rows: the tree before it (.cache/base, d5d9cc3, carried) against this one, the loader
# alone, 500x375 and plain photos, interleaved
o=$OUT/call3; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
el "share 0.01, ResNet-18 fed, two rounds"
SHARE=0.01 PROGRESSIVE=500000 ROUNDS=2 MODELS=resnet18 WARMUP=300 WINDOW=6 \
  ARGS="--step-priority -1" timeout 200 bash scripts/bench/gpu_host.sh $o/r0.01 progressive 2>&1 | grep -a "round"
for kind in fixed photos; do
  el "$kind loader alone: before EXIF (base) vs now (this)"
  BASE=.cache/base ROUNDS=1 WINDOW=8 timeout 175 bash scripts/bench/gpu_host.sh $o/v$kind versus $kind 2>&1 | grep -a "round"
done
el done
