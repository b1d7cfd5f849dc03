# call 5 (one H200, fresh): phone photos under the default decode="auto" now that their JPEGs
# fit the arena: 800 of them (12.5 batches of 64 an epoch), the loader alone, auto against cuda
o=$OUT/call5; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
echo "tree: $(cat .cache/calls/TREE)"
bash scripts/bench/gpu_host.sh $o none 2>&1 | head -3
export PYTHONPATH=$PWD/.cache/site:$PWD
ph=bench-data/phone-800.tgz
python3 scripts/bench/make_imagenet_like.py --sizes fixed --width 4032 --height 3024 \
  --exif-share 0.3 --images 800 --out $ph 2>&1 | tail -1
el "phone, batch 64: loader alone, auto then cuda"
timeout 150 python3 scripts/bench/bench.py --archive $ph --shards 0 --models= --recipes loader \
  --decode auto,cuda --batch-size 64 --warmup 100 --steps 100000 --max-seconds 8 \
  --out $o/phone64-auto-cuda.json 2>&1 | grep -a "loader alone\|trial:" | head -3
el done
