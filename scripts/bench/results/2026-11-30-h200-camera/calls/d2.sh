# call 2 (fresh H200): the GPU decode tests whole (camera JPEGs, arithmetic ones to the
# packers, the gpu_packers count), the plain copy's and the loader's tests; what nvImageCodec
# does with an arithmetic-coded JPEG when the screen is bypassed
o=$OUT/call2; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
echo "tree: $(cat .cache/calls/TREE)"
python3 -c "import torch, PIL; print('torch', torch.__version__, torch.cuda.get_device_name(), 'Pillow', PIL.__version__)"
el "tests"
timeout 420 bash scripts/bench/gpu_host.sh $o tests tests/test_gpudecode.py tests/test_cache.py \
  tests/test_decode.py 2>&1 | tail -1
grep -a -E "FAILED|ERROR|passed|failed" $o/pytest.log | tail -8
export PYTHONPATH=$PWD/.cache/site:$PWD
el "nvImageCodec on an arithmetic-coded JPEG, unscreened"
timeout 60 python3 - <<'PY' 2>&1 | grep -v "nvtiff\|nvjpeg2k\|Note:" | tail -8
import numpy as np, torch
from imageloader.gpujpeg import NvImageCodecJpeg
for engine in ("hw", "all"):
    dec = NvImageCodecJpeg(torch.device("cuda"), "RGB", engine=engine)
    datas = [np.frombuffer(open(f"tests/data/{n}.jpg", "rb").read(), np.uint8)
             for n in ("huffman", "arithmetic")]
    try:
        out = dec.decode(datas); torch.cuda.synchronize()
        print(engine, "decoded", [tuple(x.shape) if x is not None else None for x in out],
              "refused", dec.refused)
    except Exception as e:
        print(engine, "raised", type(e).__name__, str(e)[:300])
PY
el done
