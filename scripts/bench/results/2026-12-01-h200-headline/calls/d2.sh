# call 2 (H200, fresh): the wheels of .whl installed (DALI's pieces come in calls 3-7); the two
# 16,000-image archives of the headline made; the read/vocab/remote/index/plan tests
o=$OUT/call2; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
echo "tree: $(cat .cache/calls/TREE)"; nvidia-smi -L; ls -la .cache/dali/*/
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
el "install"
bash scripts/bench/gpu_host.sh $o/none none 2>&1 | tail -3
export PYTHONPATH=$PWD/.cache/site:$PWD
el "archives"
for kind in photos fixed; do
  python3 scripts/bench/make_imagenet_like.py --sizes $kind --images 16000 \
    --out $BENCH_DATA/$kind-16000.tgz | tail -1
done
el "tests"
timeout 200 bash scripts/bench/gpu_host.sh $o/t tests tests/test_vocab.py tests/test_remote.py \
  tests/test_index.py tests/test_read.py tests/test_plan.py 2>&1 | tail -4
el done
