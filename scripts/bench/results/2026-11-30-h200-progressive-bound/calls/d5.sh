# call 5 (one H200, fresh): IMAGELOADER_GPU_PROGRESSIVE's new default, "auto" (each packer
# sends progressive JPEGs under 0.5 MP to the GPU while decoding them would keep it busy over
# half its time): its tests on CUDA; then packers (=0) against auto, interleaved: plain photos
# (1% progressive) ResNet-18 fed, 30% progressive loader alone and ResNet-18 fed
o=$OUT/call5; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
nvidia-smi --query-gpu=driver_version --format=csv,noheader
el "tests: progressive, fallbacks, refusals, auto"
timeout 100 bash scripts/bench/gpu_host.sh $o tests tests/test_gpudecode.py \
  -k "fallbacks or refuse or auto" 2>&1 | tail -1
grep -a -E "FAILED|Error" $o/pytest.log | head -10
el "share 0.01, ResNet-18 fed: packers vs auto"
SHARE=0.01 MODELS=resnet18 WARMUP=300 WINDOW=6 ARGS="--step-priority -1" \
  timeout 140 bash scripts/bench/gpu_host.sh $o/r0.01 progressive 2>&1 | grep -a "round"
el "share 0.3, loader alone: packers vs auto"
SHARE=0.3 WINDOW=6 timeout 130 bash scripts/bench/gpu_host.sh $o/p30 progressive 2>&1 | grep -a "round"
el "share 0.3, ResNet-18 fed: packers vs auto"
SHARE=0.3 MODELS=resnet18 WARMUP=300 WINDOW=6 ARGS="--step-priority -1" \
  timeout 110 bash scripts/bench/gpu_host.sh $o/r0.3 progressive 2>&1 | grep -a "round"
el done
