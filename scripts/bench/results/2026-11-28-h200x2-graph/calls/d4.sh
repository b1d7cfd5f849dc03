# call 4 (GPU 0 and 16 cores of the 2-GPU host): decode="auto"'s first epoch against "cuda" (the
# trial's CPU probe and skip); then ResNet-18 on photos, eager and --cuda-graph, with the
# loader's streams at CUDA priority 0 (the default) and -1 (ahead of the steps)
export BENCH_DATA=.cache/bench-data
o=$OUT/call4; mkdir -p $o
start=$(date +%s)
CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 timeout 330 bash scripts/bench/gpu_host.sh $o firstepoch photos \
  > $o/firstepoch.out 2>&1; echo rc=$?
grep -a -v '^$' $o/firstepoch.out | grep -v nvjpeg2k | tail -30
echo "== priority rows at $(( $(date +%s) - start )) s"
export PYTHONPATH=$PWD/.cache/site:$PWD PYTHONUNBUFFERED=1
for row in "graph 0" "graph -1" "eager -1"; do
  set -- $row; flag=""; [ $1 = graph ] && flag=--cuda-graph
  PRIO=$2 CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 timeout 80 python3 .cache/calls/prio.py \
    --data $BENCH_DATA/photos-32000.tgz --val $BENCH_DATA/val-1000.tgz --size 224 --batch-size 256 \
    --max-steps 60 --workers 15 --print-every 0 --epochs 3 $flag --out-dir $o/r 2>&1 \
    | grep '^steady\|Error' | sed "s/^/photos resnet18 $1 priority $2: /"
  cat $o/r/metrics.jsonl >> $o/priority.jsonl; rm -rf $o/r
done
echo wall $(( $(date +%s) - start )) s
