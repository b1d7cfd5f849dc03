# call 3 (fresh H200): the final tree's tests of the read, cache, loader, pool and prefetch
# stages with CUDA (the readers now name members of a plain copy by the archive given)
o=$OUT/call3; mkdir -p $o
echo "tree: $(cat .cache/calls/TREE)"
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
timeout 470 bash scripts/bench/gpu_host.sh $o tests tests/test_[a-fh-mp]*.py 2>&1 | tail -1
grep -a -E "FAILED|ERROR" $o/pytest.log | head -20
