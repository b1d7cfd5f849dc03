# call 34 (one H200): the engines' refusals counted (tests), and which JPEGs they refuse and
# what that costs a lane (probe_engines.py) on photos and 500x375
o=$OUT/call34; mkdir -p $o
git log --oneline -1 > $o/tree.txt
bash scripts/bench/gpu_host.sh $o/t tests tests/test_gpujpeg.py tests/test_gpudecode.py tests/test_scripts.py \
  -k "refuse or probe_engines or each_nvimgcodec_engine" 2>&1 | tail -2
bash scripts/bench/gpu_host.sh $o engines photos 2>&1 | tail -45
bash scripts/bench/gpu_host.sh $o engines fixed 2>&1 | tail -22
