# call 1 (one H200, fresh): the arena's CUDA tests and the loader's GPU decode tests; then
# 1024x768 photos (~228 KB, 8,000): probe_arena's count, and the loader alone (decode="cuda")
# with a slot's room fixed at 192 KiB against sized from the archive, two rounds interleaved
o=$OUT/call1; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
echo "tree: $(cat .cache/calls/TREE)"
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"; nvidia-smi --query-gpu=driver_version --format=csv,noheader
el "tests: the arena, the loader's GPU decode"
timeout 170 bash scripts/bench/gpu_host.sh $o tests tests/test_gpudecode.py \
  -k "arena or slot_holds or labels_pixels or photo_archive or every_gpu_decoder or busy_gpu" 2>&1 | tail -1
grep -a -E "FAILED|Error" $o/pytest.log | head -10
el "xga: loader alone, fixed vs sized, two rounds"
ARENA_KINDS=xga ROUNDS=2 WINDOW=8 timeout 360 bash scripts/bench/gpu_host.sh $o/xga arena 2>&1 \
  | grep -a -v "images/s$"
el done
