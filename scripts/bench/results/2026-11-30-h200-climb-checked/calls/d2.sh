# call 2 (warm after call 1): ResNet-18 fed, packers (=0) against auto (climbing), two rounds
# interleaved: 30% progressive, then 5%
o=$OUT/call2; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
fed() { SHARE=$1 PROGRESSIVE=auto ROUNDS=2 MODELS=resnet18 WARMUP=300 WINDOW=6 \
  ARGS="--step-priority -1" timeout $2 bash scripts/bench/gpu_host.sh $o/r$1 progressive 2>&1 | grep -a "round"; }
el "30% fed"; fed 0.3 300
el "5% fed"; fed 0.05 250
el done
