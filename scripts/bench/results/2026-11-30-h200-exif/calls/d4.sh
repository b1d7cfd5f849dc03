# call 4 (one H200, fresh): branch exif-gpu with TorchCodec's own EXIF turn allowed for
# (call 3: TorchCodec 0.17 turns rotated JPEGs upright itself on CUDA, so they were turned
# twice). The GPU stage's CUDA tests that decode rotated JPEGs, and the crops
o=$OUT/call4; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
el "tests"
timeout 220 bash scripts/bench/gpu_host.sh $o tests tests/test_gpudecode.py \
  -k "every_gpu_decoder or rotated or upright or triton_and_roi or fallbacks or crop_kernel or busy_gpu or photo_archive or turns" 2>&1 | tail -1
grep -a -E "FAILED|Error" $o/pytest.log | head -10
el done
