# call 2 (one H200): regions again, now that the default lanes are two of the engines alone and
# the engines are the wall (call 1: decode_at p50 30-34 ms a batch beside ResNet-18). Loader alone
# and ResNet-18 / ResNet-50 on photos, regions off against on (IMAGELOADER_REGIONS_FROM), interleaved.
o=$OUT/call2; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
export BENCH_DATA=.cache/bench-data
el "loader alone, regions off / from 1 MP / off / from 0.25 MP"
REGIONS_FROM="1000000 250000" WINDOW=8 timeout 170 bash scripts/bench/gpu_host.sh $o/a regions photos 2>&1 \
  | grep -a "photos round" | tail -4
el "ResNet-18, regions off / from 1 MP, two rounds"
REGIONS_FROM="1000000" MODELS=resnet18 WARMUP=300 WINDOW=6 ROUNDS=2 ARGS="--step-priority -1" \
  timeout 190 bash scripts/bench/gpu_host.sh $o/b regions photos 2>&1 | grep -a "photos round" | tail -4
el "ResNet-18, regions off / from 0.25 MP"
REGIONS_FROM="250000" MODELS=resnet18 WARMUP=300 WINDOW=6 ARGS="--step-priority -1" \
  timeout 100 bash scripts/bench/gpu_host.sh $o/c regions photos 2>&1 | grep -a "photos round" | tail -2
el "ResNet-50, regions off / from 1 MP"
REGIONS_FROM="1000000" MODELS=resnet50 WARMUP=300 WINDOW=6 ARGS="--step-priority -1" \
  timeout 110 bash scripts/bench/gpu_host.sh $o/d regions photos 2>&1 | grep -a "photos round" | tail -2
el done
