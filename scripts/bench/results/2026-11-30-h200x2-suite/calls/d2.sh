# call 2 (2-GPU H200 host, both GPUs visible): the final tree's suite with CUDA, part 2 of 3:
# read, cache, distributed (its 2-GPU tests), loader, pool, prefetch and the rest a-p
o=$OUT/call2; mkdir -p $o
echo "tree: $(cat .cache/calls/TREE)"
python3 -c "import torch, PIL; print('torch', torch.__version__, torch.cuda.get_device_name(), torch.cuda.device_count(), 'GPUs', 'Pillow', PIL.__version__)"
nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1; nproc
ls .whl | sed 's/-py.*//; s/-cp.*//' | tr '\n' ' '; echo
timeout 570 bash scripts/bench/gpu_host.sh $o tests tests/test_[a-fh-mp]*.py 2>&1 | tail -1
grep -a -E "FAILED|ERROR" $o/pytest.log | head -20
