# call 4 (one H200, fresh): the arena above 1 MiB where the host's memory has room. Phone
# photos made (1,600, as in calls 1-3) while the new tests and the arena's and start's CUDA
# tests run; probe_arena's rows; then the loader alone at the default batch of 256: the
# default arena (now with room) against --arena 1024 (the cap before), interleaved
o=$OUT/call4; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
echo "tree: $(cat .cache/calls/TREE)"
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
nvidia-smi --query-gpu=driver_version --format=csv,noheader; free -g | head -2; df -h /dev/shm | tail -1
ph=bench-data/arena-phone/phone.tgz; mkdir -p bench-data/arena-phone
python3 scripts/bench/make_imagenet_like.py --sizes fixed --width 4032 --height 3024 \
  --exif-share 0.3 --images 1600 --out $ph > $o/make.log 2>&1 &
maker=$!
el "tests: the arena and the start (CUDA), the pool's memory, the loader's shared memory"
timeout 200 bash scripts/bench/gpu_host.sh $o tests tests/test_gpudecode.py tests/test_pool.py \
  tests/test_loader.py -k "arena or slot_holds or room or above_the_cap or warmed or busy_gpu \
  or shared_memory or host_memory" 2>&1 | tail -1
grep -a -E "FAILED|ERROR" $o/pytest.log | head -20
export PYTHONPATH=$PWD/.cache/site:$PWD
el "archive"; timeout 150 tail --pid=$maker -f /dev/null; tail -1 $o/make.log
python3 scripts/bench/probe_arena.py --archive $ph --archive-images 1600 --images 512 2>&1 | tail -1
for arena in auto 1024 auto; do
  el "phone, batch 256: loader alone, cuda, arena $arena"
  timeout 100 python3 scripts/bench/bench.py --archive $ph --shards 0 --models= --recipes loader \
    --decode cuda --arena $arena --warmup 19 --steps 100000 --max-seconds 10 \
    --out $o/phone256-$arena.json 2>&1 | grep -a "loader alone" | head -1
done
el done
