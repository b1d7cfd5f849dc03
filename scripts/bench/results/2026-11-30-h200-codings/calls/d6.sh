# call 6 (fresh H200, the session's last device seconds): Options(split=...) (61d1e3f): the
# vocabulary, regions and pack tests, the training script on two splits, with CUDA there
# (only rapidgzip and isal carried: nothing here decodes on the GPU)
o=$OUT/call6; mkdir -p $o
echo "tree: $(cat .cache/calls/TREE)"
timeout 230 bash scripts/bench/gpu_host.sh $o tests tests/test_vocab.py tests/test_index.py \
  tests/test_pack.py tests/test_summary.py tests/test_plan.py tests/test_train.py \
  -k "not test_train or split" 2>&1 | tail -1
grep -a -E "FAILED|ERROR" $o/pytest.log | head -10
