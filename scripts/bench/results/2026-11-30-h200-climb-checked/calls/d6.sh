# call 6 (fresh): plain photos (1%) fed ResNet-18, packers against auto, a second round
o=$OUT/call6; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
el "1% fed, round 2"
SHARE=0.01 PROGRESSIVE=auto ROUNDS=1 MODELS=resnet18 WARMUP=300 WINDOW=6 \
  ARGS="--step-priority -1" timeout 200 bash scripts/bench/gpu_host.sh $o/r0.01 progressive 2>&1 | grep -a "round"
el done
