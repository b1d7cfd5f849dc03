# call 4 (one H200, warm after call 3 if it can): is the -3% on plain photos, ResNet-18 fed,
# the hybrid fallback's presence? A bound of 2 pixels sends no JPEG to the GPU but gives the
# engines' decoder its fallback. Then decode="auto" (16 packers) on 30% progressive
o=$OUT/call4; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
el "share 0.01, ResNet-18 fed, bound 2 pixels (fallback present, nothing sent), two rounds"
SHARE=0.01 PROGRESSIVE=2 ROUNDS=2 MODELS=resnet18 WARMUP=300 WINDOW=6 \
  ARGS="--step-priority -1" timeout 200 bash scripts/bench/gpu_host.sh $o/r0.01 progressive 2>&1 | grep -a "round"
el "share 0.3, loader alone, decode=auto"
SHARE=0.3 PROGRESSIVE=500000 DECODE=auto WARMUP=200 WINDOW=8 timeout 150 bash scripts/bench/gpu_host.sh $o/a0.3 progressive 2>&1 | grep -a "round\|share"
el done
