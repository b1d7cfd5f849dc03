# call 12 (one H200; no 2-GPU host lent any more): test_train.py and test_distributed.py on the
# tree with --cuda-graph's new defaults (the 2-GPU test skips here)
o=$OUT/call12; mkdir -p $o
start=$(date +%s)
timeout 330 bash scripts/bench/gpu_host.sh $o tests tests/test_train.py tests/test_distributed.py \
  > $o/tests.out 2>&1; echo tests rc=$?; tail -30 $o/tests.out
echo wall $(( $(date +%s) - start )) s
