# call 2 (warm): phone photos (4032x3024, 3.3 MB, 1,600; batches of 64 so that 25 an epoch
# keep every worker busy): how many the arena turns away, and the loader alone with a slot's
# room at 192 KiB, 1 MiB (the cap), 4 MiB; the CPU path, auto. Then regions on 1024x768
# (xga, where the engines are the wall): the loader alone, regions off and from 0.5 MP
o=$OUT/call2; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
echo "tree: $(cat .cache/calls/TREE)"
export PYTHONPATH=$PWD/.cache/site:$PWD
ph=bench-data/arena-phone/phone.tgz
ls -la $ph bench-data/arena-xga/xga.tgz
python3 scripts/bench/probe_arena.py --archive $ph --archive-images 1600 --images 512 --batch-size 64 \
  2>&1 | tail -3
for arena in 1024 4096 192; do
  el "phone: loader alone, cuda, arena $arena KiB"
  timeout 100 python3 scripts/bench/bench.py --archive $ph --shards 0 --models= --recipes loader \
    --decode cuda --arena $arena --batch-size 64 --warmup 75 --steps 100000 --max-seconds 10 \
    --out $o/phone-$arena.json 2>&1 | grep -a "loader alone\|fallback"
done
el "phone: loader alone, cpu and auto (arena sized)"
timeout 150 python3 scripts/bench/bench.py --archive $ph --shards 0 --models= --recipes loader \
  --decode cpu,auto --batch-size 64 --warmup 75 --steps 100000 --max-seconds 10 \
  --out $o/phone-cpu-auto.json 2>&1 | grep -a "loader alone\|trial:\|fallback"
el "xga: regions off / from 0.5 MP, loader alone"
ARCHIVE=bench-data/arena-xga/xga.tgz BASE=. THIS_ENV=IMAGELOADER_REGIONS_FROM=500000 ROUNDS=2 \
  WINDOW=8 WARMUP=50 timeout 220 bash scripts/bench/gpu_host.sh $o/xga versus xga 2>&1 \
  | sed "s#, base: #, regions off: #; s#, this: #, regions from 0.5 MP: #"
el done
