# call 3 (back to back on one H200): the final tree's suite with CUDA, part 1 of 3:
# the GPU decoders (test_gpudecode, test_gpujpeg, test_nvbatch)
o=$OUT/call3; mkdir -p $o
echo "tree: $(cat .cache/calls/TREE)"
python3 -c "import torch, PIL; print('torch', torch.__version__, torch.cuda.get_device_name(), 'Pillow', PIL.__version__)"
ls .whl | sed 's/-py.*//; s/-cp.*//' | tr '\n' ' '; echo
timeout 560 bash scripts/bench/gpu_host.sh $o tests tests/test_[gn]*.py 2>&1 | tail -1
grep -a -E "FAILED|ERROR" $o/pytest.log | head -20
