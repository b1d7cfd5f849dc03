#!/usr/bin/env bash
# Everything the GPU host must show, in two parts that each fit one device call:
#   bash scripts/gpu_host.sh OUT_DIR tests    # the whole suite (CUDA tests included), ~4 min
#   bash scripts/gpu_host.sh OUT_DIR bench    # both data sets, loader and training, ~6 min
# bench builds two 32,000-image archives (ImageNet-like 500x375, and varied photos with a
# tail of large ones: scripts/make_imagenet_like.py --sizes), measures the inflate rate per
# core and the plain copy (scripts/bench_inflate.py), then on each archive: the loader alone
# (its first epoch and the steady state of later ones) and ResNet-18 / ResNet-50 against their
# data-on-GPU rate, timed after more untimed steps than an epoch holds (so the plain copy is
# in use and every loader buffer has drained), with decode="auto" (the default) and "cpu".
# Optional wheels in .whl/ (nvImageCodec, rapidgzip, isal, torchcodec) are installed first.
# OUT_DIR receives pytest.log, or inflate-*.json, bench-*.json/.log and the charts.
set -uo pipefail
out=${1:-bench-out}; part=${2:-bench}
mkdir -p "$out"
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$PWD/.cache/site" .whl/*.whl
  rm -f "$PWD/.cache/site/nvidia/__init__.py"  # a namespace package, shared with torch's
  export PYTHONPATH="$PWD/.cache/site"
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, torchvision, os; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'cores', os.cpu_count())"
quiet='nvjpeg2k\|nvtiff\|nvTIFF\|nvJPEG2000'  # nvImageCodec's notes about codecs we do not use
if [ "$part" = tests ]; then
  python3 -m pytest -q -p no:cacheprovider 2>&1 | grep -v "$quiet" | tee "$out/pytest.log" | tail -30
  exit 0
fi
data=${BENCH_DATA:-bench-data}
mkdir -p "$data"
for kind in photos fixed; do
  archive="$data/$kind-32000.tgz"
  [ -f "$archive" ] || python3 scripts/make_imagenet_like.py --sizes "$kind" --images 32000 \
      --out "$archive" | tail -1
  python3 scripts/bench_inflate.py --archive "$archive" --sample-mb 600 \
    --out "$out/inflate-$kind.json" 2>&1 \
    | grep -v "$quiet" | tail -12
  # 125 batches an epoch: 170 untimed steps reach into the second epoch.
  python3 scripts/bench.py --archive "$archive" --shards 0 --models resnet18,resnet50 \
    --recipes ceiling,ours,loader --decode auto,cpu --prefetch 2 --warmup 170 --steps 60 \
    --max-seconds 20 --out "$out/bench-$kind.json" --plot "$out/bench-$kind.png" 2>&1 \
    | grep -v "$quiet" | tee "$out/bench-$kind.log" | tail -16
done
