# call 1 (fresh H200): the RGB-coded screen's CUDA test (56e023d, never run on a GPU), the
# camera/arithmetic/screen tests, JPEGs cut inside their scan on the GPU path; then
# probe_codings.py: what each GPU decoder makes of those JPEGs, asked directly
o=$OUT/call1; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
echo "tree: $(cat .cache/calls/TREE)"
python3 -c "import torch, PIL; print('torch', torch.__version__, torch.cuda.get_device_name(), 'Pillow', PIL.__version__)"
nvidia-smi --query-gpu=driver_version --format=csv,noheader; nproc
el "tests"
timeout 300 bash scripts/bench/gpu_host.sh $o tests tests/test_gpudecode.py \
  -k "rgb or screening or camera or arithmetic or cut" 2>&1 | tail -1
grep -a -E "FAILED|ERROR|passed|failed" $o/pytest.log | tail -12
export PYTHONPATH=$PWD/.cache/site:$PWD
el "probe_codings"
timeout 200 python3 scripts/bench/probe_codings.py --out $o/codings.json 2>&1 \
  | grep -v "nvtiff\|nvjpeg2k\|Note:" | tail -70
el done
