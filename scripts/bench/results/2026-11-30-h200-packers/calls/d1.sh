# call 1 (fresh H200): the final tree's arena tests on CUDA (session 42's last three changes
# unrun there), with phone photos made beside them; then the packers with GPU decoding on
# phone photos, batch 256: 8 (the "cuda" default), 4, 2, interleaved, the pool's memory each
o=$OUT/call1; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
echo "tree: $(cat .cache/calls/TREE)"
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
nvidia-smi --query-gpu=driver_version --format=csv,noheader; free -g | head -2; df -h /dev/shm | tail -1
nproc
ph=bench-data/arena-phone/phone.tgz; mkdir -p bench-data/arena-phone
python3 scripts/bench/make_imagenet_like.py --sizes fixed --width 4032 --height 3024 \
  --exif-share 0.3 --images 1600 --out $ph > $o/make.log 2>&1 &
maker=$!
el "tests: the arena's (CUDA and CPU), the pool's memory"
timeout 200 bash scripts/bench/gpu_host.sh $o tests tests/test_gpudecode.py tests/test_pool.py \
  -k "arena or slot_holds or room or above_the_cap or host_memory" 2>&1 | tail -1
grep -a -E "FAILED|ERROR" $o/pytest.log | head -20
export PYTHONPATH=$PWD/.cache/site:$PWD
el "archive"; timeout 150 tail --pid=$maker -f /dev/null; tail -1 $o/make.log
for packers in 8 4 2 8 4; do
  el "phone, batch 256: loader alone, cuda, $packers packers"
  timeout 100 python3 scripts/bench/bench.py --archive $ph --shards 0 --models= --recipes loader \
    --decode cuda --gpu-workers $packers --warmup 19 --steps 100000 --max-seconds 10 --verbose \
    --out $o/phone256-p$packers-$(date +%s).json 2> $o/log-p$packers.txt | grep -a "loader alone"
  grep -a "room\|page-locked\|readers" $o/log-p$packers.txt | head -3
done
el done
