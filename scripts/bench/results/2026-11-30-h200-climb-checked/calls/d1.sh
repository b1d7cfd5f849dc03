# call 1 (one H200, fresh): the climb's CUDA tests (fallbacks, refusals, auto); then 30%
# progressive, the loader alone, packers (=0) against auto (climbing), two rounds interleaved;
# then plain photos (1%) fed ResNet-18, packers against auto (must stay par: level 0)
o=$OUT/call1; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"; nvidia-smi --query-gpu=driver_version --format=csv,noheader
git log -1 --format=%h 2>/dev/null
el "tests: fallbacks, refusals, auto"
timeout 110 bash scripts/bench/gpu_host.sh $o tests tests/test_gpudecode.py \
  -k "fallbacks or refuse or auto" 2>&1 | tail -1
grep -a -E "FAILED|Error" $o/pytest.log | head -10
el "30%, loader alone: packers vs auto, two rounds"
SHARE=0.3 PROGRESSIVE=auto ROUNDS=2 WINDOW=8 timeout 250 \
  bash scripts/bench/gpu_host.sh $o/p30 progressive 2>&1 | grep -a "round"
el "1%, ResNet-18 fed: packers vs auto"
SHARE=0.01 PROGRESSIVE=auto ROUNDS=1 MODELS=resnet18 WARMUP=300 WINDOW=6 \
  ARGS="--step-priority -1" timeout 150 bash scripts/bench/gpu_host.sh $o/r0.01 progressive 2>&1 | grep -a "round"
el done
