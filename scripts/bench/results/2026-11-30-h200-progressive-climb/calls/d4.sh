# call 4 (fresh): auto climbing to every progressive JPEG when the large ones still keep the
# packer busy (this tree) against main (packers: =0), ResNet-18 fed, 30% then 5% progressive
o=$OUT/call4; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
fed() { SHARE=$1 MODELS=resnet18 WARMUP=300 WINDOW=6 ARGS="--step-priority -1" \
  timeout $2 bash scripts/bench/gpu_host.sh $o/r$1 progressive 2>&1 | grep -a "round"; }
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
el "30% fed"; fed 0.3 250
el "5% fed"; fed 0.05 150
el done
