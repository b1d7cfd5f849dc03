# call 4 (back to back on one H200): the final tree's suite with CUDA, part 2 of 3:
# read, cache, loader, pool, prefetch and the rest a-p
o=$OUT/call4; mkdir -p $o
echo "tree: $(cat .cache/calls/TREE)"
python3 -c "import torch, PIL; print('torch', torch.__version__, torch.cuda.get_device_name(), 'Pillow', PIL.__version__)"
ls .whl | sed 's/-py.*//; s/-cp.*//' | tr '\n' ' '; echo
timeout 560 bash scripts/bench/gpu_host.sh $o tests tests/test_[a-fh-mp]*.py 2>&1 | tail -1
grep -a -E "FAILED|ERROR" $o/pytest.log | head -20
