# call 3 (one H200): the decode lanes' streams at priority -3 (above the steps' -1) against the
# default 0, rows interleaved: ResNet-18 on photos (two more pairs), ResNet-50 on photos and
# ResNet-18 on 500x375 (one pair each). Steps at priority -1, decode="cuda".
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call3; mkdir -p $o; start=$(date +%s)
p=$BENCH_DATA/photos-16000.tgz; f=$BENCH_DATA/fixed-16000.tgz
( [ -f $p ] || python3 scripts/bench/make_imagenet_like.py --sizes photos --images 16000 --out $p 2>&1 | tail -1
  [ -f $f ] || python3 scripts/bench/make_imagenet_like.py --sizes fixed --images 16000 --out $f 2>&1 | tail -1 ) > $o/gen.log 2>&1
bash scripts/bench/gpu_host.sh $o/t tests tests/test_prefetch.py -k priority 2>&1 | tail -1
cat $o/gen.log; export PYTHONPATH="$PWD/.cache/site:$PWD" PYTHONUNBUFFERED=1
row() {  # LANES-PRIORITY TAG ARCHIVE MODEL RECIPES
  timeout $(( 590 - ($(date +%s) - start) )) python3 scripts/bench/bench.py --archive $3 --shards 0 \
    --models $4 --recipes $5 --decode cuda --warmup 300 --steps 3000 --max-seconds 6 \
    --step-priority -1 --stream-priority $1 --out $o/$4-$(basename $3 .tgz)-lanes$1-$2.json 2>&1 \
    | grep -a "^    \(ceiling\|ours\)" | cut -c 1-200 | sed "s/^/$4 $(basename $3 .tgz) lanes $1 $2: /"
}
row -3 3 $p resnet18 ours; row 0 3 $p resnet18 ours; row 0 4 $p resnet18 ours; row -3 4 $p resnet18 ours
row 0 1 $p resnet50 ceiling,ours; row -3 1 $p resnet50 ours
row -3 1 $f resnet18 ceiling,ours; row 0 1 $f resnet18 ours
echo wall $(( $(date +%s) - start )) s
