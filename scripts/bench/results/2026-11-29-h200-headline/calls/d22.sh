# session 27, call 22 (one H200, warm after call 21): a second and third round of ResNet-18 on photos, DALI then ours
export BENCH_DATA=.cache/bench-data PYTHONPATH="$PWD/.cache/site:$PWD:$PWD/.cache/dali-site" PYTHONUNBUFFERED=1
a=$BENCH_DATA/photos-16000.tgz; o=$OUT/call22; mkdir -p $o; start=$(date +%s)
for r in 2 3; do
python3 scripts/bench/bench_dali.py --archive $a --models resnet18 --warmup 200 --steps 2000 --max-seconds 6 \
  --out $o/dali-photos-r18-$r.json 2>&1 | grep -v "^Note:\|Failed to load\|nvjpeg2k\|nvtiff\|nvTIFF\|nvJPEG2000" | tail -4
python3 scripts/bench/bench.py --archive $a --shards 0 --models resnet18 --recipes ceiling,ours,loader --decode auto \
  --warmup 200 --steps 2000 --max-seconds 6 --out $o/ours-photos-r18-$r.json 2>&1 | grep -v "nvjpeg2k\|nvtiff\|nvTIFF\|nvJPEG2000" | tail -5
done
echo wall $(( $(date +%s) - start )) s
