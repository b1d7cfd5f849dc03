# call 1 (one H200, fresh): the shared memory check on the GPU path (every CUDA loader test
# starts through it): tests/test_gpudecode.py and tests/test_loader.py whole; meanwhile, at
# the lowest CPU priority, the archives of calls 2-3 are made (tests are not timed)
o=$OUT/call1; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
echo "tree: $(cat .cache/calls/TREE)"
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
nvidia-smi --query-gpu=driver_version --format=csv,noheader; nproc; df -h /dev/shm | tail -1
mkdir -p bench-data/arena-phone bench-data/arena-xga
( nice -n 19 python3 scripts/bench/make_imagenet_like.py --sizes fixed --width 4032 --height 3024 \
    --exif-share 0.3 --images 1600 --out bench-data/arena-phone/phone.tgz 2>&1 | tail -1
  nice -n 19 python3 scripts/bench/make_imagenet_like.py --sizes fixed --width 1024 --height 768 \
    --images 8000 --out bench-data/arena-xga/xga.tgz 2>&1 | tail -1 ) > $o/make.log 2>&1 &
maker=$!
el "tests: test_gpudecode.py, test_loader.py"
timeout 470 bash scripts/bench/gpu_host.sh $o tests tests/test_gpudecode.py tests/test_loader.py \
  2>&1 | tail -1
grep -a -E "FAILED|ERROR" $o/pytest.log | head -20
el "archives"
timeout 60 tail --pid=$maker -f /dev/null; cat $o/make.log; ls -la bench-data/arena-*/
el done
