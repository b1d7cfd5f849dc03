# call 3 (warm): 1024x768 photos, the default decode="auto" feeding ResNet-50 and ResNet-18
# (on a priority -1 stream, as train_resnet.py steps), fixed vs sized, one round interleaved;
# their data-on-GPU rates; the CPU path and auto, loader alone
o=$OUT/call3; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
echo "tree: $(cat .cache/calls/TREE)"
export PYTHONPATH=$PWD/.cache/site:$PWD
el "data-on-GPU rates"
timeout 90 python3 scripts/bench/bench.py --archive bench-data/arena-xga/xga.tgz --shards 0 \
  --models resnet50,resnet18 --recipes ceiling --steps 100000 --max-seconds 6 --step-priority -1 \
  --out $o/ceiling.json 2>&1 | grep -a "ceiling"
el "xga: fed, auto, fixed vs sized"
ARENA_KINDS=xga ROUNDS=1 DECODE=auto MODELS=resnet50,resnet18 WARMUP=200 WINDOW=6 \
  ARGS="--step-priority -1" timeout 300 bash scripts/bench/gpu_host.sh $o/xga arena 2>&1 \
  | grep -a -v "images/s$"
el "xga: loader alone, cpu and auto (sized)"
timeout 120 python3 scripts/bench/bench.py --archive bench-data/arena-xga/xga.tgz --shards 0 \
  --models= --recipes loader --decode cpu,auto --warmup 200 --steps 100000 --max-seconds 8 \
  --out $o/xga-cpu-auto.json 2>&1 | grep -a "loader alone\|trial:"
el done
