#!/usr/bin/env bash
# Everything the GPU host must show, in parts that each fit one device call (run from the
# repository root):
#   bash scripts/bench/gpu_host.sh OUT_DIR tests     # the whole suite, CUDA tests included,
#                                                    # 11-14 min on an H200 (2026-11-27)
#   bash scripts/bench/gpu_host.sh OUT_DIR tests tests/test_[gn]*.py  # a part of it (pytest
#                                                    # arguments), in three calls: [gn] the GPU
#                                                    # decoders ~4.5 min, [a-fh-mp] ~5.5, [r-z]
#                                                    # ~4.5 (H200, 2026-11-29)
#   bash scripts/bench/gpu_host.sh OUT_DIR bench     # both data sets, loader and training, ~6 min
#   bash scripts/bench/gpu_host.sh OUT_DIR overlap   # what overlaps: trace, copies, demos, ~3 min
#   bash scripts/bench/gpu_host.sh OUT_DIR ranks fixed   # 2-GPU host: exactly once, resume,
#   bash scripts/bench/gpu_host.sh OUT_DIR ranks photos  # and 1 vs 2 GPUs, ~5-7 min each
#   bash scripts/bench/gpu_host.sh OUT_DIR remote    # one archive from disk and over HTTP, ~3 min
#   bash scripts/bench/gpu_host.sh OUT_DIR decoders  # GPU JPEG decoders alone, lanes, ~4 min
#   bash scripts/bench/gpu_host.sh OUT_DIR dali photos   # NVIDIA DALI beside ours, same
#   bash scripts/bench/gpu_host.sh OUT_DIR dali fixed    # archive and host, ~5 min each;
#                                 # TRACE=1: and 6 steps of each model traced, fed by each
#   bash scripts/bench/gpu_host.sh OUT_DIR lanes photos  # GPU decoding in two split lanes
#   bash scripts/bench/gpu_host.sh OUT_DIR lanes fixed   # (the default) vs one, ~4-5 min each
#   bash scripts/bench/gpu_host.sh OUT_DIR trial     # does decode="auto" keep the faster? ~7 min
#   bash scripts/bench/gpu_host.sh OUT_DIR threads [photos|fixed]  # what slows the training
#                                 # thread, ~3 min (SPECS="hw+hw nvjpeg": beside lanes alone)
#   BESIDE=1 bash scripts/bench/gpu_host.sh OUT_DIR threads  # the loader beside it: in its
#                                 # process or in another? ~2 min
#   bash scripts/bench/gpu_host.sh OUT_DIR packers   # auto vs cuda with 8 and 16 packers, ~4 min
#   bash scripts/bench/gpu_host.sh OUT_DIR share     # the GPU or the host: what holds ResNet-18
#                                                    # back when the loader feeds it? ~4 min
#                                                    # (ARCH=resnet50: ResNet-50's)
#   bash scripts/bench/gpu_host.sh OUT_DIR ddp fixed  # 2-GPU host: why ResNet-18 loses more
#   bash scripts/bench/gpu_host.sh OUT_DIR ddp photos # per GPU beside a second rank, ~9 min each
#   bash scripts/bench/gpu_host.sh OUT_DIR spread [photos|fixed]  # one GPU: how uneven
#                                 # ResNet-18's fed steps are (DDP's lockstep cost), ~6 min
#   bash scripts/bench/gpu_host.sh OUT_DIR blocking [photos|fixed]  # where fed ResNet-18's
#                                 # training thread waits: context switches, stacks, ~4 min
#   bash scripts/bench/gpu_host.sh OUT_DIR sidestream [photos|fixed]  # ResNet-18's steps on a
#                                 # side stream: what the loader beside them lacks, ~5 min
#   bash scripts/bench/gpu_host.sh OUT_DIR firstepoch [photos|fixed]  # decode="auto"'s first
#                                 # epoch (its trial) against "cuda": loader, ResNet-18, ~4 min
#   bash scripts/bench/gpu_host.sh OUT_DIR host      # 2-GPU host: what two runs take from each
#                                                    # other without DDP; shared cores, ~8 min
#   bash scripts/bench/gpu_host.sh OUT_DIR beside    # 2-GPU host: which neighbour slows a
#                                                    # fed ResNet-18: a model or a loader? ~3 min
#   bash scripts/bench/gpu_host.sh OUT_DIR spy [fixed|photos]  # where the loader's threads and
#                                                    # processes spend their time (py-spy), ~2 min
#   bash scripts/bench/gpu_host.sh OUT_DIR start [photos|fixed]  # what the loader's first
#                                 # batch waits for: a timeline of its start (SPY=1: and
#                                 # py-spy over it), ~1 min; IMAGES=64000 EPOCHS=2: a long
#                                 # first epoch against the next; PYC=1 (any part): .pyc
#                                 # files written first, as a user's install has them
#   bash scripts/bench/gpu_host.sh OUT_DIR profile [photos|fixed]  # ResNet-18's steps traced
#                                 # with its data on the GPU and fed by one lane and two, ~3 min
#   bash scripts/bench/gpu_host.sh OUT_DIR suspects  # what slows ResNet-18's training thread
#                                 # on photos: the probe's rows, decoder pools, regions, ~8 min
#   SAMPLE=walls.tgz bash scripts/bench/gpu_host.sh OUT_DIR check [photos|fixed]  # CPU and
#                                 # GPU pixels compared (check_decode.py), and the tests that
#                                 # compare them, ~4 min
#   bash scripts/bench/gpu_host.sh OUT_DIR engines [photos|fixed]  # which JPEGs the hardware
#                                 # engines refuse, what refusals cost a lane's batch, ~1 min
#   bash scripts/bench/gpu_host.sh OUT_DIR nvjpeg [photos|fixed]  # nvJPEG's engines called
#                                 # directly against nvImageCodec's call (probe_nvjpeg.py), ~1 min;
#                                 # PROCESSES=N: one direct thread in each of N processes at once
#   bash scripts/bench/gpu_host.sh OUT_DIR batchcall # nvImageCodec's Python API against one C
#                                                    # call per batch (nvbatch), ~2 min
#   bash scripts/bench/gpu_host.sh OUT_DIR yuv       # the engines into RGB or into YCbCr (no
#                                                    # colour conversion), ~2 min; YUV_BESIDE=
#                                                    # resnet50: what each costs that model, ~4
#   BASE=.cache/base bash scripts/bench/gpu_host.sh OUT_DIR versus [fixed|photos]  # the loader
#                                 # alone from this tree and another, interleaved, ~1 min a row
#   bash scripts/bench/gpu_host.sh OUT_DIR regions [photos|fixed]  # the loader alone with
#                                 # regions off and on from 1 MP, 0.25 MP, every image, ~4 min
#   bash scripts/bench/gpu_host.sh OUT_DIR arena     # larger JPEGs (1024x768 at quality 90,
#                                 # 95; ARENA_KINDS=phone: 12 MP): a batch's JPEG room fixed
#                                 # against sized, ~3 min a kind (phone: more than a call)
#   SHARE=0.3 bash scripts/bench/gpu_host.sh OUT_DIR progressive  # photos with that share
#                                 # progressive: decoded by the packers against "auto" (or each
#                                 # of PROGRESSIVE: 1, a pixel bound), the loader alone, ~3 min
# bench builds two 32,000-image archives (ImageNet-like 500x375, and varied photos with a
# tail of large ones: make_imagenet_like.py --sizes), measures the inflate rate per core and
# the plain copy (bench_inflate.py), then on each archive: the loader alone (its first epoch and
# the steady state of later ones) and ResNet-18 / ResNet-50 against their data-on-GPU rate,
# timed after more untimed steps than an epoch holds (so the plain copy is in use and every
# loader buffer has drained), with decode="auto" (the default) and "cpu".
# overlap: a profiler trace of ResNet-50 steps with prefetch 0 and 2 drawn as a timeline
# (plot_timeline.py), pinned / registered / pageable copy bandwidth (bench_h2d.py), the
# training crops' GPU time (bench_gpu_crop.py) and the stream demos.
# ranks fixed: every image exactly once over 2 ranks for 2 epochs from one .tgz, and for one
# from 16 shards, resume under 2 ranks, each split of an archive of two (scripts/check_ranks.py
# --split: 7,000 train and 1,000 val images); then, on either kind,
# ResNet-18 and ResNet-50 from one .tgz with the default decode (3 epochs) and their
# data-on-GPU ceilings (train_resnet.py --data-on-gpu), on 1 GPU and on 2: steady img/s after
# 10 steps of each epoch. (The suite, `tests`, holds the second-GPU and distributed tests.)
# A part of it: CHECKS=0 leaves the rank checks out, ARCHS="resnet50" FEEDS="loader" GPUS=1
# narrow it, STEPS (default 60) sets the steps of each epoch;
# STEPS_AS (default "default": no step flag, what a user gets, eager on one GPU and the graph
# on two; `scaling.py --defaults` pairs those runs; results/2026-11-29-h200x2-defaults) times
# each row with those steps; "eager graph": with eager steps and with train_resnet.py
# --cuda-graph (replays at most 0 steps ahead, the 2-GPU runs' default); graph:N with
# --graph-ahead N (graph:-1: no bound);
# STREAM=default|side|high sets train_resnet.py --train-stream (its default, auto: high on one
# GPU, +0.3-4.9% img/s in bench.py's rows, results/2026-11-29-h200-priority; the default
# stream for the 2-GPU ranks, or side under the graph).
# PREFETCH=4 trains with deeper prefetch (does it absorb one rank's late batch under DDP? It did
# not: results/2026-11-26-h200x2-waits, where no rank waited for its batch).
# TORCH_NCCL_HIGH_PRIORITY=1 (torch's own switch, passed on to the ranks) puts NCCL's
# all-reduces on high-priority streams, ahead of the loader's kernels (the ddp part tries it).
# remote: bench_remote.py on the photo archive, decoded as the default does, batches on the GPU
# (needs fsspec and aiohttp with its dependencies among the wheels in .whl/).
# Optional wheels in .whl/ (nvImageCodec, rapidgzip, isal, torchcodec, webdataset) are
# installed first. OUT_DIR receives pytest.log, or the JSON, logs and charts of the part.
set -uo pipefail
out=${1:-bench-out}; part=${2:-bench}
here=scripts/bench
mkdir -p "$out"
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$PWD/.cache/site" .whl/*.whl
  rm -f "$PWD/.cache/site/nvidia/__init__.py"  # a namespace package, shared with torch's
  export PYTHONPATH="$PWD/.cache/site"
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD" PYTHONUNBUFFERED=1
if [ "${PYC:-0}" = 1 ]; then
  # The host runs Python without writing bytecode (`python3 -B` in its children) and its
  # packages carry no .pyc: every process compiles numpy and ours anew (~0.6-0.9 s of a worker's
  # start against ~0.2 s with .pyc, as a user's pip install leaves them). PYC=1 writes them
  # first, so that a start is timed as a user's would be (results/2026-11-27-h200-start).
  python3 -m compileall -q -j 0 "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    imageloader scripts $([ -d .cache/site ] && echo .cache/site) > /dev/null 2>&1 \
    || true  # some packages ship sources for other Pythons (torch's py312_intrinsics.py on 3.11)
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, torchvision, os; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'cores', os.cpu_count())"
# The cores as the guest sees them (a VM may hide hyperthreads): rank rates depend on them.
lscpu | grep -E '^(Model name|CPU\(s\)|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\)):' \
  | tr -s ' ' | paste -sd ';'
quiet='nvjpeg2k\|nvtiff\|nvTIFF\|nvJPEG2000'  # nvImageCodec's notes about codecs we do not use
data=${BENCH_DATA:-bench-data}
mkdir -p "$data"

ensure_archive() {  # make_imagenet_like.py ARGS... --out PATH, unless PATH is there
  local path=$1; shift
  [ -f "$path" ] || python3 $here/make_imagenet_like.py "$@" --out "$path" | tail -1
}

on() {  # GPU CPUS NAME COMMAND...: python3 COMMAND on that GPU and those CPUs, its output in
  # $work/NAME.log (`work`: the calling part's folder)
  local gpu=$1 cpus=$2 name=$3; shift 3
  CUDA_VISIBLE_DEVICES=$gpu taskset -c "$cpus" python3 "$@" > "$work/$name.log" 2>&1
}

labelled() {  # METRICS LABEL [ROUND]: the last line of a run's metrics.jsonl with "row" (and
  # "round") added, so that the runs of one part gather in one file
  python3 -c 'import json, sys; last = json.loads(open(sys.argv[1]).read().splitlines()[-1])
tags = {"row": sys.argv[2], **({"round": int(sys.argv[3])} if len(sys.argv) > 3 else {})}
print(json.dumps({**tags, **last}))' "$@"
}

tests() {
  # A test blocked in native code with the GIL held never sees pytest-timeout's signal (a CUDA
  # test hung so on the 2 x H100 host), and its thread method needs the GIL too: faulthandler
  # dumps every stack from C after 200 s in one test and ends the run.
  # --durations: the suite takes ~14 of a session's 30 device minutes; the slowest say where.
  python3 -m pytest -q -rs -p no:cacheprovider --timeout 150 -o faulthandler_timeout=200 \
    -o faulthandler_exit_on_timeout=true --durations=20 "$@" 2>&1 \
    | grep --line-buffered -v "$quiet" | tee "$out/pytest.log" | tail -55
}

bench() {
  for kind in photos fixed; do
    local archive="$data/$kind-32000.tgz"
    ensure_archive "$archive" --sizes "$kind" --images 32000
    python3 $here/bench_inflate.py --archive "$archive" --sample-mb 600 \
      --out "$out/inflate-$kind.json" 2>&1 | grep --line-buffered -v "$quiet" | tail -12
    # 125 batches an epoch: 170 untimed steps reach into the second epoch.
    python3 $here/bench.py --archive "$archive" --shards 0 --models resnet18,resnet50 \
      --recipes ceiling,ours,loader --decode auto,cpu --prefetch 2 --warmup 170 --steps 60 \
      --max-seconds 20 --out "$out/bench-$kind.json" --plot "$out/bench-$kind.png" 2>&1 \
      | grep --line-buffered -v "$quiet" | tee "$out/bench-$kind.log" | tail -16
  done
}

overlap() {
  local archive="$data/fixed-32000.tgz" work
  work=$(mktemp -d)
  ensure_archive "$archive" --sizes fixed --images 32000
  python3 $here/bench.py --archive "$archive" --shards 0 --models resnet50 --recipes ours \
    --decode cpu --prefetch 0,2 --warmup 10 --steps 20 --trace "$work/trace.json" \
    --out "$out/bench-trace.json" 2>&1 | grep --line-buffered -v "$quiet" | tail -6
  python3 $here/plot_timeline.py "$work/trace-p0-resnet50.json" \
    --compare "$work/trace-p2-resnet50.json" --labels "prefetch=0" "prefetch=2" \
    --out "$out/timeline.png" --title "ResNet-50 training steps" 2>&1 | tail -12
  python3 $here/bench_h2d.py --out "$out/h2d.json" 2>&1 | tail -8
  python3 $here/bench_gpu_crop.py 2>&1 | tee "$out/gpu-crop.log" | tail -6
  python3 $here/demo_overlap_chunks.py --out "$out/overlap.json" 2>&1 | tail -6
  python3 $here/demo_pinned_pageable.py --out "$out/pinned.json" 2>&1 | tail -6
  python3 $here/bench_parallel.py --out "$out/parallel.json" 2>&1 | tail -6
}

ranks() {  # one data kind per call: fixed (with the rank checks) or photos
  local kind=${1:-fixed} steps=${STEPS:-60} archive val
  archive="$data/$kind-32000.tgz" val="$data/val-1000.tgz"
  local shards=0; [ "$kind" = fixed ] && shards=16
  ensure_archive "$archive" --sizes "$kind" --images 32000 --shards $shards
  # Validation on 1,000 other images of the same 100 classes: the runs time training.
  ensure_archive "$val" --images 1000 --seed 1
  if [ "$kind" = fixed ] && [ "${CHECKS:-1}" = 1 ]; then
    echo "== exactly once: 2 ranks, 2 epochs, one .tgz; then resume cut after 20 batches"
    python3 -m torch.distributed.run --nproc-per-node=2 scripts/check_ranks.py --data \
      "$archive" --epochs 2 --workers 15 --resume-at 20 --out "$out/ranks-tgz.jsonl" 2>&1 \
      | grep '^{'
    echo "== exactly once: 2 ranks, 16 shards"
    python3 -m torch.distributed.run --nproc-per-node=2 scripts/check_ranks.py --data \
      "$data/$kind-32000-shard-*.tgz" --epochs 1 --workers 15 --out "$out/ranks-shards.jsonl" \
      2>&1 | grep '^{'
    echo "== exactly once: 2 ranks, each split of a train/ + val/ .tgz (every 8th image val)"
    ensure_archive "$data/splits-8000.tgz" --images 8000 --val-every 8
    for split in train val; do
      python3 -m torch.distributed.run --nproc-per-node=2 scripts/check_ranks.py --data \
        "$data/splits-8000.tgz" --split $split --epochs 2 --workers 15 \
        --out "$out/ranks-split-$split.jsonl" 2>&1 | grep '^{'
    done
  fi
  # Each rank has its own 16 cores (the 1-GPU run is held to half the host; the 2 ranks are
  # pinned, --pin-cores) and the loader's defaults. The loader runs take 3 epochs of STEPS (60)
  # steps: decode="auto"'s trial times nothing in the first 64 batches (all the first epoch), then
  # the GPU's window in the second; a CPU turn, where the CPU's bound allows one, would fall in
  # the second and third (`scaling.py --trial` shows it): take STEPS=120 where it does. On
  # H200 hosts no ResNet-50 run took one since (results/2026-11-29-h200-trial), ResNet-18 never.
  local train="scripts/train_resnet.py --data $archive --val $val --size 224 --batch-size 256
    --max-steps $steps --workers 15 --print-every 0 ${PREFETCH:+--prefetch $PREFETCH}
    ${STREAM:+--train-stream $STREAM}"
  local one="env CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 python3"
  local two="python3 -m torch.distributed.run --nproc-per-node=2"
  for step in ${STEPS_AS:-default}; do
    local graph=""
    case $step in
      default) ;;                        # train_resnet.py's own choice for each GPU count
      eager) graph="--no-cuda-graph" ;;  # the 2-GPU runs' default is the graph
      graph) graph="--cuda-graph" ;;     # at most 0 steps ahead, the default
      graph:*) graph="--cuda-graph --graph-ahead ${step#graph:}" ;;
      *) echo "STEPS_AS: default, eager, graph or graph:N, not '$step'" >&2; return 2 ;;
    esac
    for arch in ${ARCHS:-resnet18 resnet50}; do
      for feed in ${FEEDS:-data-on-gpu loader}; do
        local flag="--epochs 3"; [ $feed = data-on-gpu ] && flag="--epochs 1 --data-on-gpu"
        for gpus in ${GPUS:-1 2}; do
          local launch=$one pin=""
          [ $gpus = 2 ] && launch=$two pin="--pin-cores"
          echo "== $kind $arch $step $feed, $gpus GPU(s)"
          $launch $train --arch $arch $flag $pin $graph --out-dir "$out/r" 2>&1 \
            | grep '^steady\|Error\|error:' | sed "s/^/$kind $arch $step $feed $gpus GPU(s): /"
          cat "$out/r/metrics.jsonl" >> "$out/train-$kind.jsonl"; rm -rf "$out/r"
        done
      done
    done
  done
}

remote() {
  local archive="$data/photos-32000.tgz"
  ensure_archive "$archive" --sizes photos --images 32000
  python3 $here/bench_remote.py --archive "$archive" --seconds 15 --readers 8 --workers 15 \
    --decode auto --device cuda --out "$out/remote.json" 2>&1 | grep --line-buffered -v "$quiet" \
    | tee "$out/remote.log" | tail -12
}

decoders() {  # the decoders alone on 8,192 images of each kind, batches of 256
  local fast="fancy=0/reuse=1/tensors=0" rows
  rows="nvimgcodec/$fast,nvimgcodec/backends=hw/$fast,nvimgcodec/backends=hybrid/$fast"
  rows="$rows,nvimgcodec/threads=2/$fast,nvimgcodec/threads=3/$fast"
  rows="$rows,nvimgcodec/threads=2/backends=hw|hw/$fast"
  rows="$rows,nvimgcodec/threads=2/backends=default|hybrid/$fast"
  rows="$rows,nvimgcodec/threads=3/backends=default|hybrid|hybrid/cpu=7/$fast"
  rows="$rows,nvimgcodec/threads=2/backends=default|hybrid/cpu=8/$fast/opts=nvjpeg_cuda_decoder:hybrid_huffman_threshold=0"
  rows="$rows,nvimgcodec/backends=hw0.65+hybrid/$fast,nvimgcodec/backends=hw~+hybrid~/$fast"
  rows="${DECODER_ROWS:-$rows}"
  for kind in photos fixed; do
    local archive="$data/$kind-8192.tgz"
    ensure_archive "$archive" --sizes "$kind" --images 8192
    python3 $here/bench_decoders.py --archive "$archive" --images 8192 --rows "$rows" \
      --check 8 --out "$out/decoders-$kind.json" 2>&1 | grep --line-buffered -v "$quiet" \
      | cut -c1-400
  done
}

lanes() {  # one data kind per call: loader alone and ResNet-18/50, GPU decoding in two
  # split lanes (the default, "auto") and in one (Options.gpu_lanes), 16,000 images;
  # LANES="hw,hw|hybrid:4" compares others ("|": one lane splitting each batch between the
  # engines and a hybrid helper, gpujpeg.SplitJpeg), MODELS=resnet18 narrows it,
  # CPU_LARGE="none,2000000" adds rows where the packers decode photos of >= 2 MP on the CPU,
  # PRIORITY=-1 puts the lanes' and helper's streams at that CUDA priority, READERS=2 reads
  # with that many reader processes (do 8 cost the training step on hosts where it slows?);
  # timed windows of STEPS steps (60) or WINDOW seconds (12), whichever ends first
  local kind=${1:-photos} archive
  archive="$data/$kind-16000.tgz"
  ensure_archive "$archive" --sizes "$kind" --images 16000
  python3 $here/bench.py --archive "$archive" --shards 0 --models "${MODELS:-resnet18,resnet50}" \
    --recipes ceiling,ours,loader --decode cuda --gpu-lanes "${LANES:-auto,hw|cuda:8}" \
    --cpu-large "${CPU_LARGE:-none}" ${PRIORITY:+--stream-priority $PRIORITY} \
    ${READERS:+--readers $READERS} \
    --prefetch 2 --warmup 100 \
    --steps "${STEPS:-60}" --max-seconds "${WINDOW:-12}" --out "$out/lanes-$kind.json" 2>&1 \
    | grep --line-buffered -v "$quiet" | tee "$out/lanes-$kind.log" | tail -16
}

dali() {  # DALI (bench_dali.py) and ours (bench.py, the defaults) on one 16,000-image archive
  # DALI's wheel (~200 MB) travels in parts: a tar of it and its small dependencies, split into
  # pieces of <= 45 MB under .cache/dali/p0, p1, ... (one carried per call, the machine kept
  # warm); they are joined and installed here, beside the wheels of .whl/ (not into their
  # folder: pip --target replaces the shared "nvidia" folder). DALI finds nvImageCodec beside
  # itself, hence the link. ARCHIVE: another archive than KIND's (e.g. your own photos;
  # rows labelled KIND), in the loader's layouts ([split/]class/file); SPLIT=train where it
  # holds two splits (DALI's rows read train/)
  local kind=${1:-photos} archive site="$PWD/.cache/dali-site"
  archive=${ARCHIVE:-$data/$kind-16000.tgz}
  if [ ! -d "$site/nvidia/dali" ] && compgen -G ".cache/dali/p*/part*" > /dev/null; then
    cat $(ls .cache/dali/p*/part* | sort -t t -k 2 -n) > .cache/dali/wheels.tar
    sha256sum .cache/dali/wheels.tar
    mkdir -p .cache/dali/w && tar xf .cache/dali/wheels.tar -C .cache/dali/w
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .cache/dali/w/*.whl
    rm -f "$site/nvidia/__init__.py"
    ln -sfn "$PWD/.cache/site/nvidia/nvimgcodec" "$site/nvidia/nvimgcodec"
  fi
  export PYTHONPATH="$PYTHONPATH:$site"
  ensure_archive "$archive" --sizes "$kind" --images 16000
  # TRACE=1: also 6 steps of each model traced, fed by DALI, by ours and with the data on the
  # GPU, and each fed trace set beside that one (compare_steps): where the fed steps' host
  # time goes beside DALI's threads and beside ours
  local work=$(mktemp -d) dali_trace=() ours_trace=()
  [ "${TRACE:-0}" = 1 ] && dali_trace=(--trace "$work/dali.json") ours_trace=(--trace "$work/ours.json")
  # Timed windows of 6 s: 80 steps of ResNet-18 (~1.6 s) read up to ~6 points apart. 200
  # untimed steps: decode="auto" times both paths on ~110 batches of an epoch (see trial); with
  # 100, ResNet-18's window held its trial (photos 74.2% against 94.2% after it, 2026-11-27).
  python3 $here/bench_dali.py --archive "$archive" --models resnet18,resnet50 --warmup 200 \
    --steps 2000 --max-seconds 6 --out "$out/dali-$kind.json" "${dali_trace[@]}" 2>&1 \
    | grep --line-buffered -v "$quiet" | grep -v "^Note:\|Failed to load" \
    | tee "$out/dali-$kind.log" | tail -8
  python3 $here/bench.py --archive "$archive" --shards 0 --models resnet18,resnet50 \
    --recipes ceiling,ours,loader --decode auto --warmup 200 --steps 2000 --max-seconds 6 \
    ${SPLIT:+--split "$SPLIT"} --out "$out/ours-$kind.json" "${ours_trace[@]}" 2>&1 \
    | grep --line-buffered -v "$quiet" | tee "$out/ours-$kind.log" | tail -9
  # The traces' files (a summary, a plot and the trace for each fed run) go into one tar,
  # trace-KIND.tar: a call returns at most 8 files, and 2026-12-07's lost ours to that limit
  local fed model traces="$work/trace-$kind"
  mkdir -p "$traces"
  for fed in $(ls "$work"/dali-dali-*.json "$work"/ours-*.json 2>/dev/null); do
    model=${fed##*-} model=${model%.json}
    compare_steps "$work/dali-ceiling-$model.json" "$fed" "$(basename "$fed" .json)" \
      "$traces/$(basename "$fed" .json)" "$model, 6 steps ($kind)"
    gzip -c "$fed" > "$traces/$(basename "$fed" .json).json.gz"
  done
  for fed in $(ls "$work"/dali-ceiling-*.json 2>/dev/null); do
    gzip -c "$fed" > "$traces/$(basename "$fed" .json).json.gz"
  done
  [ -z "$(ls "$traces")" ] || tar cf "$out/trace-$kind.tar" -C "$work" "trace-$kind"
}

trial() {  # decode="auto" (its trial's choice) against both paths fixed, on each data kind:
  # its rate should be the better of "cuda" (GPU decoding) and "cpu". 200 untimed steps pass
  # the trial (62 batches an epoch; it needs ~110 and restarts its count at each epoch).
  # Windows of 6 s, not 60 steps: ResNet-18's 60 steps took 1.2-1.8 s, and its auto-vs-cuda
  # rows then differed by 0-9 points from one window to the next (2026-11-26-h200-split).
  # KINDS="fixed" MODELS=resnet50 narrow it.
  for kind in ${KINDS:-photos fixed}; do
    local archive="$data/$kind-16000.tgz"
    ensure_archive "$archive" --sizes "$kind" --images 16000
    python3 $here/bench.py --archive "$archive" --shards 0 --models "${MODELS:-resnet18,resnet50}" \
      --recipes ceiling,ours --decode auto,cuda,cpu --warmup 200 --steps 1000 --max-seconds 6 \
      --out "$out/trial-$kind.json" 2>&1 | grep --line-buffered -v "$quiet" \
      | tee "$out/trial-$kind.log" | tail -14
  done
}

packers() {  # is decode="auto" ~3 points under "cuda" for ResNet-18 on photos because it keeps
  # the 16 packers its CPU arm needed (cuda: 8)? cuda with 16 packers, beside auto and cuda.
  local archive="$data/photos-16000.tgz"
  ensure_archive "$archive" --sizes photos --images 16000
  local common="--archive $archive --shards 0 --models resnet18 --recipes ceiling,ours
    --warmup 200 --steps 1000 --max-seconds 6"
  python3 $here/bench.py $common --decode cuda,auto,cuda,auto --out "$out/packers-default.json" \
    2>&1 | grep --line-buffered -v "$quiet" | tail -6
  python3 $here/bench.py $common --decode cuda,cuda --gpu-workers 16 \
    --out "$out/packers-16.json" 2>&1 | grep --line-buffered -v "$quiet" | tail -4
}

threads() {  # the GIL, busy cores and the loader's threads against ResNet-18's host side;
  # BESIDE=1: only what runs beside the data-on-GPU steps: the GPU decoder's per-image CUDA
  # calls (ctypes, no GIL), the loader in a thread of the training process, the loader in its
  # own process, then the loader feeding them (does sharing the process slow the steps?);
  # LANES_BESIDE=1: only the decoding lanes alone beside the steps (default lanes, hw,
  # cuda:8; no loader), then the loader feeding them as is, with 2 cores kept for the
  # training threads and with 4 packers (--decoders-beside); SPECS="default hw+hw ...": rows
  # beside each of those lanes alone, TRACE_SPEC: then a profiler trace of 5 steps beside one;
  # SCHEDULE=blocking|yield|spin|auto: how the process's CUDA calls wait (cudaSetDeviceFlags)
  # LOADER_LANES=hw+hw: the gpu_lanes of every loader the rows make
  local archive="$data/$1-16000.tgz"
  ensure_archive "$archive" --sizes "$1" --images 16000
  python3 $here/probe_host_threads.py --archive "$archive" --out "$out/threads.json" \
    ${BESIDE:+--beside-only} ${LANES_BESIDE:+--decoders-beside} \
    ${SPECS:+--lanes-beside $SPECS} ${TRACE_SPEC:+--trace-beside $TRACE_SPEC} \
    ${SCHEDULE:+--schedule $SCHEDULE} ${LOADER_LANES:+--loader-lanes $LOADER_LANES} 2>&1 \
    | grep --line-buffered -v "$quiet" | tee "$out/threads.log" | tail -20
  if [ -f "$out/threads.trace.json" ]; then
    python3 $here/plot_timeline.py "$out/threads.trace.json" --top 6 --host 6 --threads 16 \
      --title "resnet18 data on GPU beside lanes $TRACE_SPEC" --out "$out/threads-trace.png" \
      > "$out/threads-trace.log" 2>&1
    cat "$out/threads-trace.log"
    gzip "$out/threads.trace.json"
  fi
}

share() {  # probe_gpu_share.py: the loader beside a graphed ResNet-18 step (the GPU shared,
  # the host idle), feeding it graphed and eager; the default lanes and one split lane (LANES);
  # ARCH=resnet50: the same for ResNet-50, whose loss is not host time
  # (results/2026-11-28-h200-handover)
  local archive="$data/photos-16000.tgz"
  ensure_archive "$archive" --sizes photos --images 16000
  python3 $here/probe_gpu_share.py --archive "$archive" --gpu-lanes "${LANES:-auto,hw|cuda:8}" \
    --model "${ARCH:-resnet18}" \
    --out "$out/gpu-share.json" 2>&1 | grep --line-buffered -v "$quiet" \
    | tee "$out/gpu-share.log" | tail -20
}

train_row() {  # JSONL LABEL COMMAND...: a train_resnet.py run's last steady line, as
  # "KIND, LABEL: ...", and its last metrics line labelled in JSONL (`kind`, `work`: the
  # calling part's)
  local jsonl=$1 label=$2; shift 2
  rm -rf "$work/r"
  "$@" --out-dir "$work/r" 2>&1 | grep '^steady' | tail -1 | sed "s/^/$kind, $label: /"
  labelled "$work/r/metrics.jsonl" "$label" >> "$jsonl"
}

one_gpu_training() {  # KIND EPOCHS: makes KIND's 16,000-image archive and the validation set
  # if missing, and sets the calling part's `work` (a fresh folder) and `train`
  # (train_resnet.py on GPU ${GPU:-0} and 16 cores, decode="cuda", ARCH, EPOCHS of 60 steps)
  local kind=$1 archive="$data/$1-16000.tgz" val="$data/val-1000.tgz"
  ensure_archive "$archive" --sizes "$kind" --images 16000
  ensure_archive "$val" --images 1000 --seed 1
  work=$(mktemp -d)
  train="env CUDA_VISIBLE_DEVICES=${GPU:-0} taskset -c 0-15 python3 scripts/train_resnet.py
    --data $archive --val $val --size 224 --batch-size 256 --epochs $2 --max-steps 60
    --workers 15 --print-every 0 --decode cuda --arch ${ARCH:-resnet18}"
}

spread() {  # KIND: one GPU, how uneven the fed model's steps are and what two DDP ranks like
  # it would take per step in lockstep (lockstep.py; on 2 x H200 that prediction met the DDP
  # steps within 1 ms: results/2026-11-28-h200x2-lockstep), so that what evens ResNet-18's
  # steps can be tried on a one-GPU host. ARCH (resnet18), decode="cuda", 2 epochs of 60 steps
  # on 16 cores, the second's steady window; rows interleaved ROUNDS (2) times: the data on the
  # GPU; fed by the defaults; with the GIL's switch interval at 0.5 ms; with prefetch 4; with
  # one lane of the engines; with the steps on a non-blocking stream of their own (not CUDA's
  # legacy default stream). lockstep.py also gives each phase's spread (the wait for data,
  # forward, backward, the rest): where the steps vary. ~6 min
  local kind=${1:-photos} work train
  one_gpu_training "$kind" 2
  local jsonl="$out/spread-$kind.jsonl" round
  for round in $(seq 1 "${ROUNDS:-2}"); do
    train_row "$jsonl" "data on the GPU" $train --data-on-gpu
    train_row "$jsonl" "fed" $train
    train_row "$jsonl" "fed, switch interval 0.5 ms" $train --switch-interval 0.0005
    train_row "$jsonl" "fed, prefetch 4" $train --prefetch 4
    train_row "$jsonl" "fed, lanes hw" $train --gpu-lanes hw
    train_row "$jsonl" "fed, steps on a side stream" $train --train-stream side
  done
  python3 $here/lockstep.py "$jsonl" | tee "$out/lockstep-$kind.log"
}

sidestream() {  # KIND: with ResNet-18's steps on a side stream its training thread stops
  # sleeping in the driver (blocking: 744 against 1,953 voluntary switches a second) and its
  # steps run at the data-on-GPU pace, but it waits for data instead (19-24% of its time) and
  # the rate stays (results/2026-11-28-h200-sidestream). What the loader beside it lacks then:
  # rows interleaved ROUNDS (2) times, fed on the default stream, then on a side stream as is,
  # with a third lane of the engines (a slower loader's latency), a 0.5 ms GIL switch
  # interval (the lanes' Python waiting for the GIL the training thread now holds longer),
  # and prefetch 4. 2 epochs of 60 steps, the second's steady window; lockstep.py after. ~5 min
  local kind=${1:-photos} work train
  one_gpu_training "$kind" 2
  local jsonl="$out/sidestream-$kind.jsonl" round side="--train-stream side"
  for round in $(seq 1 "${ROUNDS:-2}"); do
    train_row "$jsonl" "fed" $train
    train_row "$jsonl" "fed, side stream" $train $side
    train_row "$jsonl" "fed, side stream, lanes hw+hw+hw" $train $side --gpu-lanes hw+hw+hw
    train_row "$jsonl" "fed, side stream, switch interval 0.5 ms" $train $side --switch-interval 0.0005
    train_row "$jsonl" "fed, side stream, prefetch 4" $train $side --prefetch 4
  done
  python3 $here/lockstep.py "$jsonl" | tee "$out/lockstep-$kind.log"
}

firstepoch() {  # KIND: the first epoch with decode="auto" (the default: its trial of CPU
  # decoding, which the packers' timed CPU decodes may skip, loader.stats.cpu_bound) against
  # "cuda", ROUNDS (2) interleaved: the loader alone on 32,000 images (bench.py, a fresh loader
  # each row: the first epoch in full and past its first batch, then the steady rate; the
  # trial's rates and bound), and ResNet-18's first epoch of 60 steps (train_resnet.py's
  # epoch row: img/s, wait%, seconds). ~4 min
  local kind=${1:-photos} archive="$data/${1:-photos}-32000.tgz" work train round d
  ensure_archive "$archive" --sizes "$kind" --images 32000
  one_gpu_training "$kind" 1
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for d in auto cuda; do
      python3 $here/bench.py --archive "$archive" --shards 0 --models= --recipes loader \
        --decode $d --warmup 10 --steps 20 --max-seconds 3 \
        --out "$out/firstepoch-$kind-$d-$round.json" 2>&1 | grep -a 'loader alone\|trial:' \
        | sed "s/^/$kind, round $round: /"
      rm -rf "$work/r"
      $train --decode $d --out-dir "$work/r" 2>&1 | grep -E '^ +0 ' \
        | sed "s/^/$kind, round $round, ResNet-18 first epoch, $d: /"
    done
  done
}

blocking() {  # KIND: where fed ResNet-18's training thread waits (probe_blocking.py): its
  # voluntary / nonvoluntary context switches per second in a window of a steady epoch, with
  # its data on the GPU, fed with the steps on CUDA's legacy default stream (the default) and
  # on a side stream (--train-stream side); then py-spy stacks of it (PROBE_DUMPS, 16; they
  # pause the process, so those runs' rates are not measurements) fed on each stream. The
  # runs' steady lines follow each row. ~4 min
  local kind=${1:-photos} work train
  one_gpu_training "$kind" 8
  local probe="python3 $here/probe_blocking.py --after 18 --seconds 8 --log $work/log
    --out $out/blocking-$kind.jsonl"
  row() {  # LABEL DUMPS TRAIN-FLAGS...
    local label=$1 dumps=$2; shift 2
    rm -rf "$work/r"
    PATH="$PWD/.cache/site/bin:$PATH" $probe --label "$kind, $label" --dumps "$dumps" -- \
      $train --out-dir "$work/r" "$@"
    grep '^steady' "$work/log" | tail -1 | sed 's/^/    /'
  }
  row "data on the GPU" 0 --data-on-gpu
  row "fed" 0
  row "fed, steps on a side stream" 0 --train-stream side
  row "fed, stacks" "${PROBE_DUMPS:-16}"
  row "fed, steps on a side stream, stacks" "${PROBE_DUMPS:-16}" --train-stream side
}

ddp() {  # 2-GPU host: why does ResNet-18 lose more per GPU beside a second rank than alone,
  # though no rank waits for its batch (results/2026-11-26-h200x2-waits)? decode="cuda" (no
  # trial), 2 epochs of 60 steps, the second epoch's steady rate, rows interleaved (ROUNDS):
  # the data-on-GPU ceilings; one GPU; two independent one-GPU runs at once, each on its GPU
  # and 16 cores (the host shared, no DDP); two GPUs under DDP; the same with NCCL on
  # high-priority streams (TORCH_NCCL_HIGH_PRIORITY=1), with the engines alone (gpu_lanes
  # "hw", no CUDA helper), and with DDP copying gradients into its buckets (train_resnet's
  # default since 2026-11-26 makes them views: less host work a step). After round 1 a
  # timeline of rank 0's steps 40-44, one GPU against two (train_resnet.py --profile), with
  # the GPU's idle and NCCL time and the steps' host time (PROFILE=0: none); the profiled
  # runs' own rates include the trace's export.
  # ARCH=resnet50 and `ddp photos` change the model and the data. SHORT=1: per round only the
  # rows one GPU, two 1-GPU runs at once and two GPUs under DDP (~4 min for 2 rounds);
  # PROFILE_ONLY=1: only the timeline. Last, lockstep.py: each row's mean step time per rank,
  # and for the 1-GPU rows what two such ranks in lockstep would take per step.
  local kind=${1:-fixed} archive val work
  archive="$data/$kind-32000.tgz" val="$data/val-1000.tgz" work=$(mktemp -d)
  ensure_archive "$archive" --sizes "$kind" --images 32000
  ensure_archive "$val" --images 1000 --seed 1
  local train="scripts/train_resnet.py --data $archive --val $val --size 224 --batch-size 256
    --epochs 2 --max-steps 60 --workers 15 --print-every 0 --decode cuda --arch ${ARCH:-resnet18}"
  local one="env CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 python3"
  local two="python3 -m torch.distributed.run --nproc-per-node=2"
  row() { train_row "$out/ddp-$kind.jsonl" "$@"; }
  pair() {  # two independent one-GPU runs at once, each on its own GPU and 16 cores
    rm -rf "$work/a" "$work/b"
    on 0 0-15 a $train --out-dir "$work/a" &
    on 1 16-31 b $train --out-dir "$work/b" &
    wait
    for g in a b; do
      grep '^steady' "$work/$g.log" | tail -1 | sed "s/^/$kind, two 1-GPU runs at once ($g): /"
      labelled "$work/$g/metrics.jsonl" "pair-$g" >> "$out/ddp-$kind.jsonl"
    done
  }
  # PROFILE_ONLY=1: the timeline alone; SHORT=1: per round the first three rows alone (where
  # the loss is), no timeline; CEILINGS=0: no data-on-GPU rows.
  local rows=1 more=1 profile=${PROFILE:-1}
  [ "${PROFILE_ONLY:-0}" = 1 ] && rows=0 more=0
  [ "${SHORT:-0}" = 1 ] && more=0 profile=0
  if [ $rows = 1 ] && [ "${CEILINGS:-1}" = 1 ]; then
    row "ceiling, 1 GPU" $one $train --data-on-gpu
    row "ceiling, 2 GPUs" $two $train --data-on-gpu --pin-cores
  fi
  for round in $(seq 1 "${ROUNDS:-2}"); do
    if [ $rows = 1 ]; then
      row "1 GPU" $one $train
      pair
      row "2 GPUs" $two $train --pin-cores
    fi
    if [ $more = 1 ]; then
      row "2 GPUs, TORCH_NCCL_HIGH_PRIORITY=1" env TORCH_NCCL_HIGH_PRIORITY=1 $two $train --pin-cores
      row "2 GPUs, lanes hw" $two $train --pin-cores --gpu-lanes hw
      row "2 GPUs, gradients copied into the buckets" $two $train --pin-cores --no-grad-bucket-view
    fi
    if [ "$round" = 1 ] && [ "$profile" = 1 ]; then
      $one $train --epochs 1 --profile --profile-at 40 --out-dir "$work/g1" 2>&1 \
        | grep '^steady' | sed "s/^/$kind, 1 GPU, profiled: /"
      $two $train --epochs 1 --pin-cores --profile --profile-at 40 --out-dir "$work/g2" 2>&1 \
        | grep '^steady' | sed "s/^/$kind, 2 GPUs, profiled: /"
      python3 $here/plot_timeline.py "$work/g1/trace.json" --compare "$work/g2/trace.json" \
        --top 8 --host 8 --labels "1 GPU" "2 GPUs (rank 0)" --out "$out/ddp-timeline-$kind.png" \
        --title "${ARCH:-resnet18} steps 40-44, the loader feeding ($kind)" \
        > "$out/ddp-timeline-$kind.log" 2>&1  # (not tee | head: head's exit would end it)
      head -3 "$out/ddp-timeline-$kind.log"
      for g in g1 g2; do gzip -c "$work/$g/trace.json" > "$out/trace-$kind-$g.json.gz"; done
    fi
  done
  # Are the 2-GPU steps as long as two one-GPU ranks in lockstep would make them?
  [ -f "$out/ddp-$kind.jsonl" ] && python3 $here/lockstep.py "$out/ddp-$kind.jsonl" \
    | tee "$out/lockstep-$kind.log"
}

host() {  # 2-GPU host: what two runs on one host take from each other, without DDP (the ddp
  # part: two independent one-GPU trainings at once lost 12-22% each). Which CPUs share a
  # physical core (probe_cpu_siblings.py); then, interleaved (ROUNDS): the loader alone
  # (bench.py, decode="cuda") on GPU 0 with CPUs 0-15, with 0-7, and two at once (GPU 1 on
  # 16-31); ResNet-18 with the data on the GPU, alone and two at once; ResNet-18 fed by the
  # loader on CPUs 0-15, on 0-7, and two at once.
  local kind=${1:-fixed} archive val work
  archive="$data/$kind-32000.tgz" val="$data/val-1000.tgz" work=$(mktemp -d)
  python3 $here/probe_cpu_siblings.py --seconds 0.5 --out "$out/siblings.json"
  ensure_archive "$archive" --sizes "$kind" --images 32000
  ensure_archive "$val" --images 1000 --seed 1
  local alone="$here/bench.py --archive $archive --shards 0 --models resnet18 --recipes loader
    --decode cuda --warmup 100 --steps 1000 --max-seconds 8"
  local train="scripts/train_resnet.py --data $archive --val $val --size 224 --batch-size 256
    --epochs 2 --max-steps 60 --workers 15 --print-every 0 --decode cuda --arch resnet18"
  say() {  # NAME LABEL: the run's rate line
    { grep -h '^steady' "$work/$1.log" | tail -1; grep -h 'loader alone' "$work/$1.log" \
        | tail -1; } | sed "s/^/$kind, $2: /"
  }
  for round in $(seq 1 "${ROUNDS:-2}"); do
    on 0 0-15 la $alone --out "$work/la.json"; say la "loader alone, CPUs 0-15"
    on 0 0-7 lh $alone --out "$work/lh.json"; say lh "loader alone, CPUs 0-7"
    on 0 0-15 pa $alone --out "$work/pa.json" &
    on 1 16-31 pb $alone --out "$work/pb.json" &
    wait; say pa "two loaders at once (GPU 0)"; say pb "two loaders at once (GPU 1)"
    for run in la lh pa pb; do  # one file for all (a call brings back only so many)
      python3 -c 'import json, sys; row = json.load(open(sys.argv[1]))["loader"][0]
print(json.dumps({"row": sys.argv[2], "round": int(sys.argv[3]), **row}))' \
        "$work/$run.json" "$run" "$round" >> "$out/host-loaders-$kind.jsonl"
    done
    on 0 0-15 ca $train --data-on-gpu --out-dir "$work/ca"; say ca "ceiling alone"
    on 0 0-15 cp $train --data-on-gpu --out-dir "$work/cp" &
    on 1 16-31 cq $train --data-on-gpu --out-dir "$work/cq" &
    wait; say cp "two ceilings at once (GPU 0)"; say cq "two ceilings at once (GPU 1)"
    on 0 0-15 ta $train --out-dir "$work/ta"; say ta "ResNet-18 fed, CPUs 0-15"
    on 0 0-7 th $train --workers 7 --out-dir "$work/th"; say th "ResNet-18 fed, CPUs 0-7"
    on 0 0-15 tp $train --out-dir "$work/tp" &
    on 1 16-31 tq $train --out-dir "$work/tq" &
    wait; say tp "two fed at once (GPU 0)"; say tq "two fed at once (GPU 1)"
    for run in ca cp cq ta th tp tq; do
      labelled "$work/$run/metrics.jsonl" "$run" "$round" >> "$out/host-$kind.jsonl"
      rm -rf "${work:?}/$run"
    done
  done
}

beside() {  # 2-GPU host: which neighbour slows ResNet-18 fed by the loader on GPU 0 (CPUs
  # 0-15): none; ResNet-18 with its data on GPU 1 (that GPU busy, its host nearly idle); the
  # loader alone on GPU 1 (its readers, packers and JPEG engines busy, no training); both on
  # CPUs 16-31, started with it and outlasting it. With each row, the GPUs' interrupts per
  # second and the CPUs that took them (every wait on a CUDA event may be one)
  local archive="$data/fixed-32000.tgz" val="$data/val-1000.tgz" work
  work=$(mktemp -d)
  ensure_archive "$archive" --sizes fixed --images 32000
  ensure_archive "$val" --images 1000 --seed 1
  local train="scripts/train_resnet.py --data $archive --val $val --size 224 --batch-size 256
    --max-steps 60 --workers 15 --print-every 0 --decode cuda --arch resnet18"
  fed() {  # LABEL: the fed run, and the GPUs' interrupts while it ran (probe_interrupts.py)
    CUDA_VISIBLE_DEVICES=0 python3 $here/probe_interrupts.py --match nvidia --top 3 -- \
      taskset -c 0-15 python3 $train --epochs 2 --out-dir "$work/f" 2>&1 \
      | awk '/^steady/ {last = $0} /^interrupts/ {print} END {print last}' \
      | sed "s/^/fed on GPU 0, $1: /"; rm -rf "$work/f"; }
  fed "alone"
  on 1 16-31 n $train --epochs 8 --data-on-gpu --out-dir "$work/n" & fed "beside ResNet-18 with its data on GPU 1"
  wait; grep -h '^steady' "$work/n.log" | tail -1 | sed 's/^/  neighbour: /'
  on 1 16-31 n $here/bench.py --archive $archive --shards 0 --models resnet18 --recipes loader --decode cuda \
    --warmup 100 --steps 5000 --max-seconds 20 & fed "beside the loader alone on GPU 1"
  wait; grep -h 'loader alone' "$work/n.log" | cut -c1-120 | sed 's/^/  neighbour: /'
  fed "alone, again"
}

spy() {  # KIND: the loader alone, once as is and once with py-spy (its wheel in .whl/) over
  # its timed window (bench.py --spy), whose stacks summarize_stacks.py sums per process and
  # thread. LANES: --gpu-lanes values, one pair of runs each.
  local kind=$1 archive="$data/$1-16000.tgz" lanes work
  work=$(mktemp -d)
  ensure_archive "$archive" --sizes "$kind" --images 16000
  echo "ptrace_scope: $(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo 'no Yama')"
  for lanes in ${LANES:-auto}; do
    local tag="$kind-${lanes//[^a-z0-9]/_}"
    local loader="$here/bench.py --archive $archive --shards 0 --models= --recipes loader
      --decode cuda --gpu-lanes $lanes --warmup 100 --steps 100000 --max-seconds ${SPY_SECONDS:-15}"
    {  # both rates head the summary's file: how much py-spy slowed the run it sampled
      python3 $loader --out "$work/$tag-plain.json" 2>&1 | grep -a 'loader alone' | head -1 \
        | sed 's/^/as is: /'
      PATH="$PWD/.cache/site/bin:$PATH" python3 $loader --spy "$work/$tag" \
        --out "$work/$tag.json" 2>&1 | grep -a 'loader alone\|py-spy' | head -2 | sed 's/^/spied: /'
    } > "$work/$tag-rates.txt"
    cat "$work/$tag-rates.txt"
    { cat "$work/$tag-rates.txt"; python3 $here/summarize_stacks.py "$work/$tag"/stacks-*.txt \
      --top 8; } > "$out/spy-$tag.log" \
      && cat "$out/spy-$tag.log" && gzip -c "$work/$tag"/stacks-*.txt > "$out/stacks-$tag.txt.gz"
  done
}

start() {  # KIND: what the loader's first batch waits for (3.2-5.1 s on an H200 host,
  # 2026-11-27): probe_start.py's timeline of the steps of a start (construction, iter(), the
  # first batch), twice, each in a fresh process (the first on a fresh host also builds
  # nvbatch's C and compiles the crop kernel, both cached on disk); BASE: another tree's
  # (holding probe_start.py) interleaved, after one untimed run; with SPY=1 then the loader
  # alone with py-spy over its start (bench.py --spy-start SPY_SECONDS, 8), whose stacks
  # summarize_stacks.py sums per process and thread. IMAGES: the archive's (16000); EPOCHS:
  # each run's (1; later ones say what the first epoch loses against them)
  local kind=${1:-photos} archive work loader run images=${IMAGES:-16000}
  archive="$data/$kind-$images.tgz" work=$(mktemp -d)
  ensure_archive "$archive" --sizes "$kind" --images "$images"
  local runs="1:. 2:." side
  [ -n "${BASE:-}" ] && runs="0:. 1:$BASE 1:. 2:$BASE 2:."  # interleaved after a first run
  for run in $runs; do
    side=${run#*:} run=${run%%:*}
    echo "== start $run, tree $side"
    python3 $side/$here/probe_start.py --archive "$archive" --decode ${DECODE:-cuda} \
      --epochs ${EPOCHS:-1} --out "$work/start-$kind-$run.json" 2>&1 | grep -v "$quiet"
  done
  [ "${SPY:-0}" = 1 ] || return 0
  loader="$here/bench.py --archive $archive --shards 0 --models= --recipes loader --decode cuda
    --warmup 10 --steps 20 --max-seconds 2"
  PATH="$PWD/.cache/site/bin:$PATH" python3 $loader --spy "$work/spy" \
    --spy-start "${SPY_SECONDS:-8}" --out "$work/spied.json" 2>&1 \
    | grep -a 'loader alone\|py-spy' | head -2 | sed 's/^/spied: /'
  python3 $here/summarize_stacks.py "$work/spy"/stacks-*.txt --top 12
  gzip -c "$work/spy"/stacks-*.txt > "$out/stacks-start-$kind.txt.gz"
}

versus() {  # KIND: the loader alone from this tree and from $BASE (another commit's
  # imageloader/ and scripts/bench/, e.g. `git archive HEAD~1 imageloader scripts/bench |
  # tar -x -C .cache/base`, carried), interleaved, ROUNDS times (2), each --gpu-lanes of LANES;
  # ARGS: more bench.py arguments for every row (e.g. "--step-priority -1"), THIS_ARGS for
  # this tree's rows only (after ARGS: a flag in both is this tree's); THIS_ENV, BASE_ENV:
  # environment settings for each side's rows (BASE may be this same tree, BASE=.: e.g.
  # BASE_ENV=IMAGELOADER_C_BATCH=0 times nvImageCodec's Python API against one C call).
  # MODELS (e.g. resnet18,resnet50): each trained from the loader instead of the loader alone
  # (a row per model: img/s and data-wait, also at epoch starts); DECODE: cuda (default), cpu,
  # auto (then WARMUP=200: the untimed steps, 100, must hold decode="auto"'s trial). ARCHIVE:
  # another archive than KIND's (rows labelled KIND).
  local kind=$1 archive=${ARCHIVE:-$data/$1-16000.tgz} round side tree lanes work rows=1
  local what="--models= --recipes loader" pick="loader alone"
  if [ -n "${MODELS:-}" ]; then
    what="--models $MODELS --recipes ours" pick="^ours " rows=$(tr , '\n' <<< "$MODELS" | wc -l)
  fi
  if [ "${DECODE:-cuda}" = auto ]; then  # and the line after each row: the trial's choice
    pick="$pick\|cpu share" rows=$((2 * rows))
  fi
  work=$(mktemp -d)
  [ -d "${BASE:-}/imageloader" ] || { echo "versus: BASE must hold another tree"; return 2; }
  [ -n "${ARCHIVE:-}" ] || ensure_archive "$archive" --sizes "$kind" --images 16000
  for round in $(seq "${ROUNDS:-2}"); do
    for side in base this; do
      if [ $side = this ]; then tree=.; else tree=$BASE; fi
      for lanes in ${LANES:-auto}; do
        env $([ $side = this ] && echo "${THIS_ENV:-}" || echo "${BASE_ENV:-}") \
          python3 "$tree/$here/bench.py" --archive "$archive" --shards 0 $what \
          --decode "${DECODE:-cuda}" --gpu-lanes "$lanes" --warmup "${WARMUP:-100}" --steps 100000 \
          --max-seconds "${WINDOW:-10}" --out "$work/x.json" ${ARGS:-} \
          $([ $side = this ] && echo "${THIS_ARGS:-}") 2>&1 | grep -a "$pick" \
          | head -"$rows" | sed "s|^|$kind round $round, $side: |"
      done
    done
  done
}

versus_each() {  # VAR KIND OFF ON VALUE...: versus on this tree (BASE=.; MODELS, LANES and
  # WINDOW as there; ROUNDS 1), VAR unset or as BASE_ENV sets it (rows labelled OFF) against
  # VAR=VALUE (labelled "ON VALUE"), for each VALUE
  local var=$1 kind=$2 off=$3 on=$4 value; shift 4
  for value in "$@"; do
    THIS_ENV="$var=$value" BASE=. ROUNDS=${ROUNDS:-1} versus "$kind" \
      | sed "s#, this: #, $on $value: #; s#, base: #, $off: #"
  done
}

regions() {  # KIND: the loader alone with regions off ("base") and on ("this") from each of
  # REGIONS_FROM pixels (IMAGELOADER_REGIONS_FROM), interleaved as versus does
  versus_each IMAGELOADER_REGIONS_FROM "$1" "regions off" "regions from" \
    ${REGIONS_FROM:-1000000 250000 1}
}

progressive() {  # SHARE (0.3): photos of which that share is progressive (0.01: as the plain
  # photos); the loader alone (MODELS: those models fed) with progressive JPEGs decoded by the
  # packers ("base": IMAGELOADER_GPU_PROGRESSIVE=0) against each of PROGRESSIVE ("auto": the
  # default, sent while they keep a packer busy; 1: every one to the GPU; a number: those of
  # fewer pixels), interleaved as versus does (ROUNDS 1)
  local share=${SHARE:-0.3} whole=$data
  data="$whole/progressive-$share"; mkdir -p "$data"
  ensure_archive "$data/photos-16000.tgz" --sizes photos --images 16000 \
    --progressive-share "$share"
  BASE_ENV=IMAGELOADER_GPU_PROGRESSIVE=0 versus_each IMAGELOADER_GPU_PROGRESSIVE photos \
    packers "GPU progressive" ${PROGRESSIVE:-auto}
  data=$whole
}

arena() {  # archives of larger JPEGs than the photos' (ARENA_KINDS, "xga xga95"; also phone):
  # what probe_arena.py counts sent to the CPU for lack of room, then the loader alone (or
  # MODELS fed; DECODE, ROUNDS, WARMUP, WINDOW as versus) with a slot's room fixed at the old
  # 192 KiB against sized from the archive (loader.arena_per_image), interleaved
  local whole=$data kind spec images warmup
  for kind in ${ARENA_KINDS:-xga xga95}; do
    case $kind in  # warmup: ~3 epochs of phone photos (1,600), ~1.5 of the others (8,000);
      # phone photos are made at ~10/s on 16 cores, and a worker fills a whole batch, so
      # 1,600 of them (6 batches an epoch) keep at most 7 workers busy
      xga) spec="--width 1024 --height 768" images=8000 warmup=50 ;;
      xga95) spec="--width 1024 --height 768 --quality 95" images=8000 warmup=50 ;;
      phone) spec="--width 4032 --height 3024 --exif-share 0.3" images=1600 warmup=18 ;;
      *) echo "arena: no kind $kind"; return 2 ;;
    esac
    data="$whole/arena-$kind"; mkdir -p "$data"
    ensure_archive "$data/$kind.tgz" --sizes fixed $spec --images $images
    python3 $here/probe_arena.py --archive "$data/$kind.tgz" --archive-images $images \
      --images $((images < 2048 ? 512 : 2048))
    ARCHIVE="$data/$kind.tgz" BASE=. ARGS="--arena 192 ${ARGS:-}" THIS_ARGS="--arena auto" \
      WARMUP=${WARMUP:-$warmup} versus "$kind" \
      | sed "s#, base: #, arena 192 KiB: #; s#, this: #, arena sized: #"
  done
  data=$whole
}
profile() {  # KIND: where ResNet-18's steps go when the loader feeds it, on one GPU:
  # torch.profiler traces of steps 40-44 (train_resnet.py --profile) with the data on the GPU,
  # fed by one lane (LANES1, "hw") and by the default lanes (or LANES2), decode="cuda";
  # plot_timeline.py's summary of each (GPU time per stream, its top kernels, the steps' host
  # time, the longest launches and what other threads were in as each ended); ARCH
  # (resnet18): e.g. ARCH=resnet50, where 2.5-4% of data-wait is left mid-epoch; TRAIN_FLAGS
  # go to every run (e.g. "--cuda-graph": steps 40-44 are then replays); PROFILE_RUNS narrows
  # the runs (ceiling one two; the ceiling is always needed for the comparison)
  local kind=${1:-photos} archive val work run
  archive="$data/$kind-16000.tgz" val="$data/val-1000.tgz" work=$(mktemp -d)
  ensure_archive "$archive" --sizes "$kind" --images 16000
  ensure_archive "$val" --images 1000 --seed 1
  local train="scripts/train_resnet.py --data $archive --val $val --size 224 --batch-size 256
    --epochs 1 --max-steps 50 --workers 15 --print-every 0 --decode cuda --arch ${ARCH:-resnet18}
    --profile --profile-at 40 ${TRAIN_FLAGS:-}"
  for run in ${PROFILE_RUNS:-ceiling one two}; do
    local extra=""
    [ $run = ceiling ] && extra="--data-on-gpu"
    [ $run = one ] && extra="--gpu-lanes ${LANES1:-hw}"
    [ $run = two ] && extra="${LANES2:+--gpu-lanes $LANES2}"
    python3 $train $extra --out-dir "$work/$run" 2>&1 | grep '^steady' | sed "s/^/$kind, $run: /"
    gzip -c "$work/$run/trace.json" > "$out/trace-$kind-$run.json.gz"
  done
  for run in $(echo ${PROFILE_RUNS:-ceiling one two} | tr ' ' '\n' | grep -v ceiling); do
    compare_steps "$work/ceiling/trace.json" "$work/$run/trace.json" "fed, lanes: $run" \
      "$out/profile-$kind-$run" "${ARCH:-resnet18} steps 40-44 ($kind)"
  done
}

compare_steps() {  # CEILING_TRACE FED_TRACE FED_LABEL OUT_BASE TITLE: plot_timeline.py's
  # summary of fed steps against the same steps with the data on the GPU (GPU time per
  # stream, top kernels, the steps' host time, the longest launches and what other threads
  # were in as each ended), OUT_BASE.png and .log; its main lines printed
  python3 $here/plot_timeline.py "$1" --compare "$2" --top 8 --host 8 --threads 8 \
    --blocked 10 --labels "data on the GPU" "$3" --out "$4.png" --title "$5" > "$4.log" 2>&1
  grep -E '^==|nothing on it|in all|host: steps|cudaLaunchKernel |launch|      ' "$4.log"
}

suspects() {  # what slows ResNet-18's training thread when the loader feeds it photos
  # (results/2026-11-27-h200-twolanes: its launches block for ms, the GPU idles 38%), one call:
  # probe_host_threads' rows beside the data-on-GPU steps (BESIDE=1 threads); the decoders'
  # buffers preallocated and padded as DALI does (IMAGELOADER_DECODER_POOLS=1) against not,
  # ResNet-18 fed, interleaved; every image's crop decoded as a region (smaller kernels on a
  # busy GPU; DALI does so) against none, ResNet-18 fed. ~8 min
  BESIDE=1 threads
  echo "== IMAGELOADER_DECODER_POOLS=1 (this) against not (base), ResNet-18 fed"
  THIS_ENV=IMAGELOADER_DECODER_POOLS=1 BASE=. MODELS=resnet18 ROUNDS=${ROUNDS:-2} \
    versus photos | tee "$out/pools-photos.log"
  echo "== regions for every image against none, ResNet-18 fed"
  REGIONS_FROM=1 MODELS=resnet18 ROUNDS=${ROUNDS:-2} regions photos \
    | tee "$out/regions-r18-photos.log"
}

yuv() {  # probe_yuv.py: the engines decoding into planar RGB against the JPEGs' own YCbCr
  # (no colour conversion), 1 and 2 lanes, the CUDA kernels' time per batch, both kinds of data;
  # YUV_BESIDE=resnet50: also that model's graphed step alone and beside the lanes decoding each way
  local kind archive
  for kind in photos fixed; do
    archive="$data/$kind-${IMAGES:-4096}.tgz"
    ensure_archive "$archive" --sizes "$kind" --images "${IMAGES:-4096}"
    python3 $here/probe_yuv.py --archive "$archive" --images 4096 --out "$out/yuv-$kind.json" \
      ${YUV_BESIDE:+--beside $YUV_BESIDE} 2>&1 | grep --line-buffered -v "$quiet" | tee "$out/yuv-$kind.log" | tail -12
  done
}

batchcall() {  # nvImageCodec's Python API against one C call per batch (bench_batch_call.py,
  # imageloader/nvbatch.py), decoders alone, both kinds of data; ENGINE (hw); and the C call
  # decoding the crops of images of REGIONS_FROM pixels or more as regions, a row per value
  # ("1000000 250000 1": the large ones, most photos, every image as DALI does); each row with
  # its GPU time per batch, kernels apart from copies
  local kind archive
  for kind in fixed photos; do
    archive="$data/$kind-16000.tgz"
    ensure_archive "$archive" --sizes "$kind" --images 16000
    python3 $here/bench_batch_call.py --archive "$archive" --images 4096 \
      --engine "${ENGINE:-hw}" --regions-from ${REGIONS_FROM:-1000000 250000 1} \
      --out "$out/batchcall-$kind.json" 2>&1 \
      | grep --line-buffered -v "$quiet" | tee "$out/batchcall-$kind.log" | tail -5
  done
}

nvjpeg() {  # KIND: nvJPEG's hardware decoder called directly against nvImageCodec's one C call,
  # decoders alone on 4,096 of the archive's JPEGs (probe_nvjpeg.py): one and two threads,
  # bitstreams in pinned host memory or on the device, the first batch's pixels compared
  local archive="$data/$1-16000.tgz"
  ensure_archive "$archive" --sizes "$1" --images 16000
  python3 $here/probe_nvjpeg.py --archive "$archive" --images 4096 \
    ${PROCESSES:+--processes $PROCESSES --passes 10} \
    --out "$out/nvjpeg-$1${PROCESSES:+-x$PROCESSES}.json" 2>&1 | grep --line-buffered -v "$quiet" | tail -16
}

engines() {  # KIND: which JPEGs the hardware engines refuse, and what refusals cost a lane
  # (probe_engines.py), on made JPEGs of each kind and 4,096 of the archive's
  local archive="$data/$1-4096.tgz"
  ensure_archive "$archive" --sizes "$1" --images 4096
  python3 $here/probe_engines.py --archive "$archive" --images 4096 \
    --out "$out/engines-$1.json" 2>&1 | grep --line-buffered -v "$quiet" | tail -40
}

check() {  # KIND: both decode paths' pixels (scripts/check_decode.py) on 2,048 images of a
  # made archive, then on SAMPLE (an archive of real images carried in: make_photo_sample.py)
  # if given, then check_decode's tests and every test of GPU pixels against the CPU path's
  # (each decoder and engine, grey batches); each report in OUT_DIR
  local archive="$data/$1-4096.tgz"
  ensure_archive "$archive" --sizes "$1" --images 4096
  python3 scripts/check_decode.py --data "$archive" --images 2048 --out "$out/check-$1.json" \
    2>&1 | grep --line-buffered -v "$quiet" | tail -30
  if [ -n "${SAMPLE:-}" ]; then
    python3 scripts/check_decode.py --data "$SAMPLE" --images 0 --batch-size 8 \
      --out "$out/check-sample.json" 2>&1 | grep --line-buffered -v "$quiet" | tail -30
  fi
  tests tests/test_gpudecode.py tests/test_scripts.py -k "check_decode or the_cpu_path"
}

case "$part" in
  none) ;;  # the wheels of .whl/ installed, nothing run (a first call before others)
  tests) shift 2; tests "$@" ;;
  bench|overlap|remote|decoders|trial|packers|share|batchcall|suspects|yuv) "$part" ;;
  threads) threads "${3:-photos}" ;;
  profile) profile "${3:-photos}" 2>&1 | tee "$out/profile-${3:-photos}.log" ;;
  ddp) ddp "${3:-fixed}" 2>&1 | tee "$out/ddp-${3:-fixed}.log" ;;
  spread) spread "${3:-photos}" 2>&1 | tee "$out/spread-${3:-photos}.log" ;;
  blocking) blocking "${3:-photos}" 2>&1 | tee "$out/blocking-${3:-photos}.log" ;;
  sidestream) sidestream "${3:-photos}" 2>&1 | tee "$out/sidestream-${3:-photos}.log" ;;
  firstepoch) firstepoch "${3:-photos}" 2>&1 | tee "$out/firstepoch-${3:-photos}.log" ;;
  host) host "${3:-fixed}" 2>&1 | tee "$out/host-${3:-fixed}.log" ;;
  beside) beside 2>&1 | tee "$out/beside.log" ;;
  spy) spy "${3:-fixed}" ;;
  start) start "${3:-photos}" 2>&1 | tee "$out/start-${3:-photos}.log" ;;
  versus) versus "${3:-fixed}" 2>&1 | tee "$out/versus-${3:-fixed}.log" ;;
  regions) regions "${3:-photos}" 2>&1 | tee "$out/regions-${3:-photos}.log" ;;
  progressive) progressive 2>&1 | tee "$out/progressive-${SHARE:-0.3}.log" ;;
  arena) arena 2>&1 | tee "$out/arena.log" ;;
  dali) dali "${3:-photos}" ;;
  engines) engines "${3:-photos}" 2>&1 | tee "$out/engines-${3:-photos}.log" ;;
  check) check "${3:-photos}" 2>&1 | tee "$out/check-${3:-photos}.log" ;;
  nvjpeg) nvjpeg "${3:-photos}" 2>&1 | tee "$out/nvjpeg-${3:-photos}.log" ;;
  lanes) lanes "${3:-photos}" ;;
  ranks) ranks "${3:-fixed}" 2>&1 | tee "$out/run-${3:-fixed}.log" ;;
  *) echo "unknown part '$part': tests, bench, overlap, remote, decoders, lanes, dali, ranks, trial, threads, packers, share, ddp, spread, blocking, sidestream, firstepoch, host, beside, spy, versus, regions, progressive, profile, suspects, batchcall, engines, check, nvjpeg or none" >&2; exit 2 ;;
esac
