# call 4 (one H200, warm after call 3): the loader alone, this tree against c29d2b2, photos
# two more interleaved pairs and 500x375 one more (its archive made here), decode="cuda".
export BENCH_DATA=.cache/bench-data PYTHONPATH="$PWD/.cache/site:$PWD" PYTHONUNBUFFERED=1
o=$OUT/call4; mkdir -p $o; start=$(date +%s)
f=$BENCH_DATA/fixed-16000.tgz
( [ -f $f ] || python3 scripts/bench/make_imagenet_like.py --sizes fixed --images 16000 --out $f 2>&1 | tail -1 ) > $o/gen.log 2>&1 &
alone() {  # SIDE KIND TAG
  local tree=.; [ $1 = base ] && tree=.cache/base
  timeout $(( 560 - ($(date +%s) - start) )) python3 $tree/scripts/bench/bench.py --archive $BENCH_DATA/$2-16000.tgz \
    --shards 0 --models= --recipes loader --decode cuda --warmup 100 --steps 100000 --max-seconds 8 \
    --out $o/alone-$1-$2-$3.json 2>&1 | grep -a "^  ours loader alone" | cut -c 1-120 | sed "s/^/$1 $2 $3: /"
}
alone base photos 2; alone this photos 2; alone this photos 3; alone base photos 3
wait; cat $o/gen.log
alone this fixed 3; alone base fixed 3
echo wall $(( $(date +%s) - start )) s
