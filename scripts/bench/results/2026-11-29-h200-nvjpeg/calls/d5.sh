# call 5 (one H200): is the host's part of the engines' work (0.67 us per KB of JPEG, call 4)
# serialized per process or per GPU? One direct thread in 1, 2 and 3 processes at once (two
# threads of one process gave no more than one, calls 3-4). Then the CUDA tests of what changed.
o=$OUT/call5; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
export BENCH_DATA=.cache/bench-data
for n in 1 2 3; do
  el "one direct thread in each of $n processes, photos"
  PROCESSES=$n timeout 150 bash scripts/bench/gpu_host.sh $o/a nvjpeg photos 2>&1 | grep -a "processes at once"
done
el "two processes, fixed"
PROCESSES=2 timeout 150 bash scripts/bench/gpu_host.sh $o/b nvjpeg fixed 2>&1 | grep -a "processes at once"
export PYTHONPATH="$PWD/.cache/site:$PWD"
el "CUDA tests: probe, gpujpeg, nvbatch"
timeout 300 python3 -m pytest -q tests/test_scripts.py tests/test_gpujpeg.py tests/test_nvbatch.py 2>&1 | tail -4
el done
