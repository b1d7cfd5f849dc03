# call 3 (warm): phone photos at the default batch of 256: the arena sized (1 MiB cap) against
# 5 MiB a slot (1.5x their mean: every JPEG fits); at batches of 64 with 4 MiB a slot, regions
# from 1 MP (IMAGELOADER_REGIONS_FROM) against none
o=$OUT/call3; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
echo "tree: $(cat .cache/calls/TREE)"
export PYTHONPATH=$PWD/.cache/site:$PWD
ph=bench-data/arena-phone/phone.tgz
for arena in 5120 auto; do
  el "phone, batch 256: loader alone, cuda, arena $arena"
  timeout 100 python3 scripts/bench/bench.py --archive $ph --shards 0 --models= --recipes loader \
    --decode cuda --arena $arena --warmup 19 --steps 100000 --max-seconds 10 \
    --out $o/phone256-$arena.json 2>&1 | grep -a "loader alone" | head -1
done
el "phone, batch 64, arena 4 MiB: regions from 1 MP"
IMAGELOADER_REGIONS_FROM=1000000 timeout 90 python3 scripts/bench/bench.py --archive $ph --shards 0 \
  --models= --recipes loader --decode cuda --arena 4096 --batch-size 64 --warmup 75 --steps 100000 \
  --max-seconds 10 --out $o/phone-4096-regions.json 2>&1 | grep -a "loader alone" | head -1
el done
