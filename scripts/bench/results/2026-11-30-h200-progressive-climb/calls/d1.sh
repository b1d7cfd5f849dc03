# call 1 (one H200, fresh): progressive_sent's CUDA test and auto's; then 30% progressive,
# the loader alone: packers against auto and against the fixed bound, interleaved
o=$OUT/call1; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"; nvidia-smi --query-gpu=driver_version --format=csv,noheader
el "tests: fallbacks, refusals, auto"
timeout 100 bash scripts/bench/gpu_host.sh $o tests tests/test_gpudecode.py \
  -k "fallbacks or refuse or auto" 2>&1 | tail -1
grep -a -E "FAILED|Error" $o/pytest.log | head -10
el "30%, loader alone: packers vs auto, packers vs 500000"
SHARE=0.3 PROGRESSIVE="auto 500000" ROUNDS=2 WINDOW=8 timeout 400 \
  bash scripts/bench/gpu_host.sh $o/p30 progressive 2>&1 | grep -a "round"
el done
