# call 1 (one H200, fresh): progressive JPEGs on the GPU (IMAGELOADER_GPU_PROGRESSIVE=1: the
# packers stop refusing them; the engines refuse them and the hw lane's retry decodes them on
# nvImageCodec's other backends) against the packers' CPU path. Tests first; then what the
# other GPU decoders do with one; then on photos with 30% progressive, interleaved, the loader
# alone and ResNet-18 fed; then the loader alone on the plain photos (1% progressive)
o=$OUT/call1; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
el "tests: screening, fallbacks with and without the switch, refusals"
timeout 150 bash scripts/bench/gpu_host.sh $o tests tests/test_gpudecode.py \
  -k "screening or fallbacks or refuse or every_gpu_decoder" 2>&1 | tail -1
grep -a -E "FAILED|Error" $o/pytest.log | head -10
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
el "one progressive JPEG through each GPU decoder"
PYTHONPATH=.cache/site:. timeout 60 python3 - <<'PY' 2>&1 | grep -v Warning | tail -8
import io, numpy as np, torch, torchvision
from PIL import Image
print("torch", torch.__version__, "torchvision", torchvision.__version__)
img = Image.effect_noise((640, 480), 40).convert("RGB")
b = io.BytesIO(); img.save(b, "JPEG", progressive=True, quality=90)
data = torch.frombuffer(bytearray(b.getvalue()), dtype=torch.uint8)
ref = torch.from_numpy(np.asarray(Image.open(io.BytesIO(b.getvalue())).convert("RGB"))).permute(2, 0, 1)
for name in ("torchvision", "torchcodec"):
    try:
        if name == "torchvision":
            out = torchvision.io.decode_jpeg([data], device="cuda")[0]
        else:
            from torchcodec.decoders import decode_jpeg
            out = decode_jpeg(data, device="cuda")
        print(name, "ok", tuple(out.shape), "mean diff",
              (out.cpu().int() - ref.int()).abs().float().mean().item())
    except Exception as e:
        print(name, "failed:", type(e).__name__, str(e)[:160])
PY
export BENCH_DATA=.cache/bench-prog; mkdir -p $BENCH_DATA
el "archive: photos, 30% progressive"
python3 scripts/bench/make_imagenet_like.py --sizes photos --images 16000 --progressive-share 0.3 \
  --out $BENCH_DATA/photos-16000.tgz | tail -1
el "loader alone: packers' CPU (base) vs GPU (this)"
BASE=. THIS_ENV=IMAGELOADER_GPU_PROGRESSIVE=1 ROUNDS=2 WINDOW=8 timeout 200 \
  bash scripts/bench/gpu_host.sh $o/v versus photos 2>&1 | grep -a "round"
el "ResNet-18 fed: packers' CPU (base) vs GPU (this)"
BASE=. THIS_ENV=IMAGELOADER_GPU_PROGRESSIVE=1 MODELS=resnet18 WARMUP=300 WINDOW=6 \
  ARGS="--step-priority -1" ROUNDS=1 timeout 150 \
  bash scripts/bench/gpu_host.sh $o/v2 versus photos 2>&1 | grep -a "round"
export BENCH_DATA=.cache/bench-plain; mkdir -p $BENCH_DATA
el "plain photos (1% progressive), loader alone: base vs this"
BASE=. THIS_ENV=IMAGELOADER_GPU_PROGRESSIVE=1 ROUNDS=1 WINDOW=8 timeout 130 \
  bash scripts/bench/gpu_host.sh $o/v3 versus photos 2>&1 | grep -a "round"
el done
