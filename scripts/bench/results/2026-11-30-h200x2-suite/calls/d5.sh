# call 5 (fresh 2-GPU H200 host): call 2's one failure, a loader on cuda:1 leaving a context
# on cuda:0, after the fix (the side streams' priority asked under cuda:1's guard); and which
# step made it: each case in a fresh process, then nvml asked whether the process is on GPU 0
o=$OUT/call5; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
echo "tree: $(cat .cache/calls/TREE)"
timeout 200 bash scripts/bench/gpu_host.sh $o tests tests/test_prefetch.py tests/test_loader.py \
  -k "second_gpu or priority or device" 2>&1 | tail -1
grep -a -E "FAILED|ERROR|^E " $o/pytest.log | head -12
export PYTHONPATH=$PWD/.cache/site:$PWD
python3 - > $o/archive.txt <<'PY'
import sys; sys.path.insert(0, "tests")
from conftest import write_archive, labeled_files
print(write_archive("/tmp/gpu0.tgz", labeled_files(2, 4)))
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
probe "priority_range, no guard" 'torch.cuda.Stream.priority_range()'
probe "priority_range under cuda:1" 'torch.cuda.set_device(1); torch.cuda.Stream.priority_range()'
probe "a tensor on cuda:1" 'torch.ones(1, device="cuda:1")'
probe "loader, decode=cpu" "$L
read(decode='cpu')"
probe "loader, nvimgcodec" "$L
read(decode='cuda', options=Options(gpu_decoder='nvimgcodec'))"
probe "loader, torchvision" "$L
read(decode='cuda', options=Options(gpu_decoder='torchvision'))"
probe "loader, default" "$L
read()"
el done
