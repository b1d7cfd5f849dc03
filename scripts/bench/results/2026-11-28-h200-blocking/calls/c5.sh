# call 5: is the fed training thread preempted? its context switches per second, data on the GPU vs fed
export BENCH_DATA=.cache/bench-data
d=$BENCH_DATA; mkdir -p $d
export PYTHONPATH=$PWD/.cache/site:$PWD
[ -f $d/photos-16000.tgz ] || python3 scripts/bench/make_imagenet_like.py --sizes photos --images 16000 --out $d/photos-16000.tgz | tail -1
[ -f $d/val-1000.tgz ] || python3 scripts/bench/make_imagenet_like.py --images 1000 --seed 1 --out $d/val-1000.tgz | tail -1
for extra in "" ; do
  CUDA_VISIBLE_DEVICES=0 python3 scripts/train_resnet.py --data $d/photos-16000.tgz --val $d/val-1000.tgz --size 224 --batch-size 256 --epochs 4 --max-steps 60 --workers 15 --print-every 0 --decode cuda --arch resnet18 $extra --out-dir /tmp/r$RANDOM > /tmp/log 2>&1 &
  pid=$!
  python3 - $pid <<'PY'
import os, sys, time
pid = sys.argv[1]
def read(tid):
    f = dict(l.split(":\t") for l in open(f"/proc/{pid}/task/{tid}/status").read().splitlines() if ":\t" in l)
    return int(f["voluntary_ctxt_switches"]), int(f["nonvoluntary_ctxt_switches"])
last = None
while os.path.exists(f"/proc/{pid}"):
    try:
        now = (time.time(), read(pid), os.sched_getaffinity(int(pid)) and 0)
        names = {t: open(f"/proc/{pid}/task/{t}/comm").read().strip() for t in os.listdir(f"/proc/{pid}/task")}
    except Exception:
        break
    if last:
        dt = now[0] - last[0]
        print(f"t={now[0]-t0:5.1f}s main thread: voluntary {(now[1][0]-last[1][0])/dt:7.0f}/s nonvoluntary {(now[1][1]-last[1][1])/dt:6.0f}/s threads {len(names)}", flush=True)
    else:
        t0 = now[0]
    last = now
    time.sleep(2)
PY
  wait $pid; grep '^steady' /tmp/log | tail -2
done
