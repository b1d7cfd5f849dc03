# call 29 (one H200, warm after five calls that carried DALI's pieces p0-p4): the CUDA tests of
# train_resnet.py's new default (--train-stream auto) and bench's priority flag; then DALI's
# rows on photos and 500x375 with the steps on the caller's stream and on one of priority -1
# (bench_dali.py --step-priority -1), interleaved, as ours were in call 27
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call29; mkdir -p $o; start=$(date +%s)
bash scripts/bench/gpu_host.sh $o/t tests tests/test_train.py tests/test_scripts.py \
  -k "stream or graph_is_the_default or priority" 2>&1 | tail -1
export PYTHONPATH="$PWD/.cache/site:$PWD:$PWD/.cache/dali-site" PYTHONUNBUFFERED=1
site="$PWD/.cache/dali-site"
cat $(ls .cache/dali/p*/part* | sort -t t -k 2 -n) > .cache/dali/wheels.tar; sha256sum .cache/dali/wheels.tar
mkdir -p .cache/dali/w && tar xf .cache/dali/wheels.tar -C .cache/dali/w
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .cache/dali/w/*.whl
rm -f "$site/nvidia/__init__.py"; ln -sfn "$PWD/.cache/site/nvidia/nvimgcodec" "$site/nvidia/nvimgcodec"
for kind in photos fixed; do
  a=$BENCH_DATA/$kind-16000.tgz
  [ -f $a ] || python3 scripts/bench/make_imagenet_like.py --sizes $kind --images 16000 --out $a 2>&1 | tail -1
  for p in default -1; do
    flag=$([ $p = default ] || echo "--step-priority $p")
    timeout $(( 585 - ($(date +%s) - start) )) python3 scripts/bench/bench_dali.py --archive $a \
      --models resnet18,resnet50 --warmup 150 --steps 2000 --max-seconds 6 $flag \
      --out $o/dali-$kind-$p.json 2>&1 | grep -a "ceiling \|DALI \|extracted" | sed "s/^/$kind $p: /"
  done
done
echo wall $(( $(date +%s) - start )) s
