# call 6 (fresh 2-GPU H200 host): after the fix (nvImageCodec made and called with its device
# current), the second-GPU test for each decoder, the probe of call 5 again, then the
# nvImageCodec lane tests (test_gpujpeg.py) on the changed decoder
o=$OUT/call6; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
echo "tree: $(cat .cache/calls/TREE)"
timeout 120 bash scripts/bench/gpu_host.sh $o/a tests tests/test_prefetch.py -k "second_gpu" -v \
  2>&1 | tail -1
grep -a -E "PASSED|FAILED|SKIPPED|^E " $o/a/pytest.log | cut -c1-160 | head -12
export PYTHONPATH=$PWD/.cache/site:$PWD
python3 - > /dev/null <<'PY'
import sys; sys.path.insert(0, "tests")
from conftest import write_archive, labeled_files
write_archive("/tmp/gpu0.tgz", labeled_files(2, 4))
PY
probe() {  # NAME CODE: run CODE in a fresh process, then say whether it is on GPU 0
  local out; out=$(timeout 60 python3 - <<PY 2>&1 | tail -1
import os, torch, pynvml
$2
pynvml.nvmlInit()
pids = [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(0))]
print("ON_GPU0" if os.getpid() in pids else "CLEAN")
PY
); echo "$1: $out"
}
L='from imageloader import ImageLoader, Options
def read(**kw):
    with ImageLoader("/tmp/gpu0.tgz", batch_size=4, size=16, device="cuda:1", workers=1, **kw) as loader:
        for x, y in loader: assert x.device == torch.device("cuda:1")'
el probe
probe "loader, nvimgcodec" "$L
read(decode='cuda', options=Options(gpu_decoder='nvimgcodec'))"
probe "loader, nvimgcodec, hw|cuda split lane" "$L
read(decode='cuda', options=Options(gpu_decoder='nvimgcodec', gpu_lanes='hw|cuda'))"
probe "loader, default" "$L
read()"
el "test_gpujpeg"
timeout 150 bash scripts/bench/gpu_host.sh $o/b tests tests/test_gpujpeg.py 2>&1 | tail -1
grep -a -E "FAILED|^E " $o/b/pytest.log | head -12
el done
