# call 1 (2 GPUs): the new CUDA tests (train_resnet --cuda-graph on one and two GPUs, the trial's
# CPU probe and skip) while the photo archive for call 2 is made
export BENCH_DATA=.cache/bench-data; mkdir -p $BENCH_DATA
o=$OUT/call1; mkdir -p $o
start=$(date +%s)
nvidia-smi -L
( python3 scripts/bench/make_imagenet_like.py --sizes photos --images 32000 --shards 0 \
    --out $BENCH_DATA/photos-32000.tgz 2>&1 | tail -1
  python3 scripts/bench/make_imagenet_like.py --images 1000 --seed 1 \
    --out $BENCH_DATA/val-1000.tgz 2>&1 | tail -1 ) > $o/gen.log &
timeout 520 bash scripts/bench/gpu_host.sh $o tests tests/test_train.py tests/test_share.py \
  tests/test_gpudecode.py::test_auto_decode_does_not_try_cpu_decoding_that_cannot_win \
  tests/test_gpudecode.py::test_a_probe_times_the_cpu_path_on_images_it_still_packs_for_the_gpu \
  > $o/tests.out 2>&1; echo rc=$?
tail -45 $o/tests.out
wait; cat $o/gen.log
echo wall $(( $(date +%s) - start )) s
