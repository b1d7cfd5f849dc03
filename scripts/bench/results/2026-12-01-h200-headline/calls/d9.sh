# call 9 (H200, warm): ResNet-18 and the loader alone once more on each kind, DALI then ours,
# the dali part's flags (a second round of the headline's ResNet-18 and alone columns)
export BENCH_DATA=.cache/bench-data; start=$(date +%s)
export PYTHONPATH=$PWD/.cache/site:$PWD:$PWD/.cache/dali-site
q='nvjpeg2k\|nvtiff\|nvTIFF\|nvJPEG2000\|^Note:\|Failed to load'
for kind in photos fixed; do
  a=.cache/bench-data/$kind-16000.tgz; o=$OUT/call9; mkdir -p $o
  echo "--- at $(( $(date +%s) - start )) s: $kind"
  timeout 120 python3 scripts/bench/bench_dali.py --archive $a --models resnet18 --warmup 200 \
    --steps 2000 --max-seconds 6 --out $o/dali-$kind.json 2>&1 | grep -v "$q" | tee $o/dali-$kind.log | tail -4
  timeout 120 python3 scripts/bench/bench.py --archive $a --shards 0 --models resnet18 \
    --recipes ceiling,ours,loader --decode auto --warmup 200 --steps 2000 --max-seconds 6 \
    --out $o/ours-$kind.json 2>&1 | grep -v "$q" | tee $o/ours-$kind.log | tail -5
done
echo wall $(( $(date +%s) - start )) s
