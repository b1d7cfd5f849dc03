# call 5 (2 x H200, a fresh host): #21's first open question, ResNet-18 on photos with the
# 2-GPU ranks stepping on a stream of priority -1 like one GPU (STREAM=high; never measured),
# every other default; the tree of this session (the lanes' one-call table).
o=$OUT/call5; mkdir -p $o
STREAM=high ARCHS=resnet18 bash scripts/bench/gpu_host.sh $o ranks photos 2>&1 | grep -a "GPU(s)\|==\|images in" | cut -c 1-300
python3 scripts/bench/scaling.py --defaults $o/train-photos.jsonl 2>&1 | tail -12
