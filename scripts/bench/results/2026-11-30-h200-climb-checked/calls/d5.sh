# call 5 (warm after call 4): 5% progressive, ResNet-18 fed, packers against auto, a third round
o=$OUT/call5; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
el "5% fed, round 3"
SHARE=0.05 PROGRESSIVE=auto ROUNDS=1 MODELS=resnet18 WARMUP=300 WINDOW=6 \
  ARGS="--step-priority -1" timeout 300 bash scripts/bench/gpu_host.sh $o/r0.05 progressive 2>&1 | grep -a "round"
el done
