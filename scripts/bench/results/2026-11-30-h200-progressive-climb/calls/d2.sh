# call 2 (warm): a middle archive (5% progressive): packers against auto, alone and fed;
# then 30% fed: auto against every one (1)
o=$OUT/call2; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
el "5%, loader alone"
SHARE=0.05 WINDOW=8 timeout 150 bash scripts/bench/gpu_host.sh $o/p05 progressive 2>&1 | grep -a "round"
el "5%, ResNet-18 fed"
SHARE=0.05 MODELS=resnet18 WARMUP=300 WINDOW=6 ARGS="--step-priority -1" \
  timeout 120 bash scripts/bench/gpu_host.sh $o/r05 progressive 2>&1 | grep -a "round"
el "30%, ResNet-18 fed: packers vs auto, packers vs all"
SHARE=0.3 PROGRESSIVE="auto 1" MODELS=resnet18 WARMUP=300 WINDOW=6 ARGS="--step-priority -1" \
  timeout 220 bash scripts/bench/gpu_host.sh $o/r30 progressive 2>&1 | grep -a "round"
el done
