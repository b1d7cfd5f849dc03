# call 31 (one H200): imageloader.step_stream's CUDA test and the scripts' tests through it
# (bench.py --step-priority, train_resnet.py --train-stream auto/high); then the GPU decoders' part
# of the whole suite
o=$OUT/call31; mkdir -p $o
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $o/gpu.csv; nproc >> $o/gpu.csv
git log --oneline -1 > $o/tree.txt
bash scripts/bench/gpu_host.sh $o/t tests tests/test_prefetch.py tests/test_train.py tests/test_scripts.py \
  -k "step_stream or stream or priority or graph_is_the_default" 2>&1 | tail -2
bash scripts/bench/gpu_host.sh $o/gn tests tests/test_[gn]*.py 2>&1 | tail -2
