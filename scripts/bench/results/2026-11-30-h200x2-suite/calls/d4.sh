# call 4 (2-GPU H200 host): each split of an archive of train/ and val/ over 2 ranks, exactly
# once for 2 epochs (check_ranks.py --split); then the loader alone on 500x375 from the tree
# before session 43 (.cache/base, 060d0ef) against this one, interleaved, two rounds
o=$OUT/call4; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
echo "tree: $(cat .cache/calls/TREE)"
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
export PYTHONPATH=$PWD/.cache/site:$PWD
el "archive"
python3 scripts/bench/make_imagenet_like.py --images 8000 --val-every 8 \
  --out $BENCH_DATA/splits-8000.tgz | tail -1
python3 -m imageloader summary $BENCH_DATA/splits-8000.tgz | tail -2
for split in train val; do
  el "check_ranks --split $split"
  timeout 150 python3 -m torch.distributed.run --nproc-per-node=2 scripts/check_ranks.py \
    --data $BENCH_DATA/splits-8000.tgz --split $split --epochs 2 --workers 15 \
    --out $o/ranks-split-$split.jsonl 2>&1 | grep -a '^{\|Error' | cut -c1-700
done
el "500x375 loader alone: before session 43 (base) vs now (this)"
BASE=.cache/base ROUNDS=2 WINDOW=8 timeout 330 bash scripts/bench/gpu_host.sh $o/vfixed versus fixed \
  2>&1 | grep -a "round"
el done
