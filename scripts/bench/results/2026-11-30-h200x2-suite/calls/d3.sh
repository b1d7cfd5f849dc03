# call 3 (2-GPU H200 host, both GPUs visible): the final tree's suite with CUDA, part 3 of 3:
# r-z (read, remote, runtime, scripts, train, vocab...)
o=$OUT/call3; mkdir -p $o
echo "tree: $(cat .cache/calls/TREE)"
python3 -c "import torch, PIL; print('torch', torch.__version__, torch.cuda.get_device_name(), torch.cuda.device_count(), 'GPUs', 'Pillow', PIL.__version__)"
nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1; nproc
ls .whl | sed 's/-py.*//; s/-cp.*//' | tr '\n' ' '; echo
timeout 570 bash scripts/bench/gpu_host.sh $o tests tests/test_[r-z]*.py 2>&1 | tail -1
grep -a -E "FAILED|ERROR" $o/pytest.log | head -20
