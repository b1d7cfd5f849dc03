# session 27, call 25 (one H200, warm after call 24 and the pieces of DALI's wheels): a second and
# third round of ResNet-18 on 500x375, DALI then ours (as call 22 on photos)
export BENCH_DATA=.cache/bench-data PYTHONPATH="$PWD/.cache/site:$PWD:$PWD/.cache/dali-site" PYTHONUNBUFFERED=1
site="$PWD/.cache/dali-site"
cat $(ls .cache/dali/p*/part* | sort -t t -k 2 -n) > .cache/dali/wheels.tar; sha256sum .cache/dali/wheels.tar
mkdir -p .cache/dali/w && tar xf .cache/dali/wheels.tar -C .cache/dali/w
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .cache/dali/w/*.whl
rm -f "$site/nvidia/__init__.py"; ln -sfn "$PWD/.cache/site/nvidia/nvimgcodec" "$site/nvidia/nvimgcodec"
a=$BENCH_DATA/fixed-16000.tgz; o=$OUT/call25; mkdir -p $o; start=$(date +%s)
for r in 2 3; do
python3 scripts/bench/bench_dali.py --archive $a --models resnet18 --warmup 200 --steps 2000 --max-seconds 6 \
  --out $o/dali-fixed-r18-$r.json 2>&1 | grep -v "^Note:\|Failed to load\|nvjpeg2k\|nvtiff\|nvTIFF\|nvJPEG2000" | tail -4
python3 scripts/bench/bench.py --archive $a --shards 0 --models resnet18 --recipes ceiling,ours,loader --decode auto \
  --warmup 200 --steps 2000 --max-seconds 6 --out $o/ours-fixed-r18-$r.json 2>&1 | grep -v "nvjpeg2k\|nvtiff\|nvTIFF\|nvJPEG2000" | tail -5
done
echo wall $(( $(date +%s) - start )) s
