# call 35 (one H200): the engines' refusal counters as committed in f9cef59 (only what the other
# backends decoded) on the GPU
o=$OUT/call35; mkdir -p $o
bash scripts/bench/gpu_host.sh $o/t tests tests/test_gpujpeg.py tests/test_gpudecode.py -k "refuse" 2>&1 | tail -2
