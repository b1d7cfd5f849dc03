# call 3 (fresh): under auto, send every progressive JPEG (this tree) against those under 0.5 MP
# (main at d759746, .cache/baseA, carried); ResNet-18 fed, 5% and 30% progressive photos
o=$OUT/call3; mkdir -p $o; start=$(date +%s); root=$PWD
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
fed() { SHARE=$1 MODELS=resnet18 WARMUP=300 WINDOW=6 ARGS="--step-priority -1" BENCH_DATA=$root/bench-data \
  timeout 150 bash scripts/bench/gpu_host.sh $2 progressive 2>&1 | grep -a "round"; }
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
el "5% fed, this (auto: all)"; fed 0.05 $o/r05a
el "5% fed, base (auto: under 0.5 MP)"; (cd .cache/baseA && export PYTHONPATH=$root/.cache/site && fed 0.05 $o/r05b | sed 's/auto/auto 0.5MP/')
el "5% fed, this (auto: all)"; fed 0.05 $o/r05c
el "30% fed, this (auto: all)"; fed 0.3 $o/r30a
el done
