# call 2 (warm): phone photos (4032x3024, ~3.3 MB, 1,600, 30% EXIF-rotated): probe_arena's
# count, the loader alone (decode="cuda") fixed vs sized, two rounds interleaved; then the CPU
# path and decode="auto" on it, loader alone
o=$OUT/call2; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
echo "tree: $(cat .cache/calls/TREE)"
export PYTHONPATH=$PWD/.cache/site:$PWD
el "phone: loader alone, fixed vs sized, two rounds"
ARENA_KINDS=phone ROUNDS=2 WINDOW=8 timeout 420 bash scripts/bench/gpu_host.sh $o/phone arena 2>&1 \
  | grep -a -v "images/s$"
el "phone: loader alone, cpu and auto (sized)"
timeout 150 python3 scripts/bench/bench.py --archive bench-data/arena-phone/phone.tgz --shards 0 \
  --models= --recipes loader --decode cpu,auto --warmup 18 --steps 100000 --max-seconds 8 \
  --out $o/phone-cpu-auto.json 2>&1 | grep -a "loader alone\|trial:"
el done
