# call 28 (next session, one H200): train_resnet.py --train-stream high: its CUDA tests, then
# ResNet-50 (and -18) eager on photos fed, 1 GPU, default stream against the high-priority one
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call28; mkdir -p $o; start=$(date +%s)
bash scripts/bench/gpu_host.sh $o/t tests tests/test_train.py -k "stream or graph_is_the_default" 2>&1 | tail -2
for s in default high; do
  STREAM=$s CHECKS=0 ARCHS="resnet50 resnet18" GPUS=1 STEPS_AS=eager FEEDS=loader \
    timeout $(( 570 - ($(date +%s) - start) )) bash scripts/bench/gpu_host.sh $o/$s ranks photos 2>&1 | grep -a '^photos' | sed "s/^/$s: /"
done
echo wall $(( $(date +%s) - start )) s
