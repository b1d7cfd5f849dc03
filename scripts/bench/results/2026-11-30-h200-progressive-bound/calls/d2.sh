# call 2 (one H200, warm after call 1 if it can): 30% progressive, the loader alone with the
# bound; then ResNet-18 fed on both archives, packers against the GPU under 0.5 MP
o=$OUT/call2; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
el "30% progressive, loader alone: packers vs GPU under 0.5 MP"
SHARE=0.3 PROGRESSIVE=500000 WINDOW=8 timeout 180 bash scripts/bench/gpu_host.sh $o/p30 progressive 2>&1 | grep -a "round"
for share in 0.01 0.3; do
  el "share $share, ResNet-18 fed"
  SHARE=$share PROGRESSIVE=500000 MODELS=resnet18 WARMUP=300 WINDOW=6 ARGS="--step-priority -1" \
    timeout 170 bash scripts/bench/gpu_host.sh $o/r$share progressive 2>&1 | grep -a "round"
done
el done
