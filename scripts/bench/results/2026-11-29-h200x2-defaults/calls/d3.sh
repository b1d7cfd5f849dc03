# call 3 (2 GPUs visible): the distributed, training, lifetime and resume tests, CUDA included
o=$OUT/call3; mkdir -p $o; start=$(date +%s)
timeout 570 bash scripts/bench/gpu_host.sh $o/t tests tests/test_distributed.py tests/test_train.py \
  tests/test_runtime.py tests/test_loader.py tests/test_plan.py 2>&1 | tail -4
echo wall $(( $(date +%s) - start )) s
