#!/usr/bin/env bash
# Scale-out evidence on a host with 2 GPUs (the device tool's nvidia-h200-x2), in one call:
#   bash scripts/gpu_ranks.sh OUT_DIR
# The cuda:1 test; exactly-once over 2 ranks (check_ranks.py, 2 epochs); ResNet-50 trained from
# ONE .tgz on 1 GPU (16 cores, like the one-GPU host) and on 2 GPUs under torchrun (each rank
# inflates the whole stream and decodes half of it). OUT_DIR receives pytest.log, ranks.jsonl,
# train-1gpu.jsonl, train-2gpu.jsonl and run.log.
set -uo pipefail
out=${1:-ranks-out}
mkdir -p "$out"
data=${BENCH_DATA:-bench-data}/imagenet-like.tgz
steps=${STEPS:-80}
{
bash scripts/gpu_checks.sh "$out" "tests/test_prefetch.py::test_second_gpu_creates_no_context_on_the_first tests/test_distributed.py"
export PYTHONPATH="$PWD/.cache/site:$PWD" PYTHONUNBUFFERED=1
[ -f "$data" ] || python3 scripts/make_imagenet_like.py --out "$data" --images 16000 \
  --classes 100 --shards 0
echo "== exactly once: 2 ranks, 2 epochs"
python3 -m torch.distributed.run --nproc-per-node=2 scripts/check_ranks.py --data "$data" --epochs 2 \
  --workers 15 --out "$out/ranks.jsonl"
val=${data%.tgz}-shard-00000.tgz; [ -f "$val" ] || val=$data
train="scripts/train_resnet.py --data $data --val $val --arch resnet50 --size 224
  --batch-size 256 --epochs 1 --max-steps $steps --workers 15 --log-every 1000"
echo "== ResNet-50, 1 GPU, cores 0-15"
CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 python3 $train --out-dir "$out/t1" 2>&1 \
  | grep -v "it/s\]$" | tail -4
echo "== ResNet-50, 2 GPUs (torchrun)"
python3 -m torch.distributed.run --nproc-per-node=2 $train --out-dir "$out/t2" 2>&1 | grep -v "it/s\]$" | tail -6
cp "$out/t1/metrics.jsonl" "$out/train-1gpu.jsonl" 2>/dev/null
cp "$out/t2/metrics.jsonl" "$out/train-2gpu.jsonl" 2>/dev/null
rm -rf "$out/t1" "$out/t2"
} 2>&1 | tee "$out/run.log"
