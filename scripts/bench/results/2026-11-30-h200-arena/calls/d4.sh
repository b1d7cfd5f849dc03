# call 4 (one H200, fresh): the arena's CUDA tests again (the loader test counted per epoch);
# 1024x768 photos at quality 95 (~370 KB): probe_arena's count and the loader alone, fixed vs
# sized, one round; 1024x768 at quality 90: ResNet-18 fed (auto), fixed vs sized, a second round
o=$OUT/call4; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
echo "tree: $(cat .cache/calls/TREE)"
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"; nvidia-smi --query-gpu=driver_version --format=csv,noheader
el "tests: the arena"
timeout 80 bash scripts/bench/gpu_host.sh $o tests tests/test_gpudecode.py -k "arena or slot_holds" 2>&1 | tail -1
grep -a -E "FAILED|Error" $o/pytest.log | head -10
el "xga95: loader alone, fixed vs sized"
ARENA_KINDS=xga95 ROUNDS=1 WINDOW=8 timeout 170 bash scripts/bench/gpu_host.sh $o/xga95 arena 2>&1 \
  | grep -a -v "images/s$"
el "xga: ResNet-18 fed, auto, fixed vs sized, round 2"
ARENA_KINDS=xga ROUNDS=1 DECODE=auto MODELS=resnet18 WARMUP=200 WINDOW=6 \
  ARGS="--step-priority -1" timeout $((440 - $(date +%s) + start)) \
  bash scripts/bench/gpu_host.sh $o/xga arena 2>&1 | grep -a -v "images/s$"
el done
