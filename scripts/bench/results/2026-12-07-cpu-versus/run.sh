set -u
for round in 1 2; do
  for kind in photos-2000 fixed-3000; do
    for tree in base head; do
      root=$([ $tree = base ] && echo .cache/base53 || echo .)
      echo "== round $round $kind $tree loader_cpu"
      python $root/scripts/bench/bench_loader_cpu.py --archive .cache/bd/$kind.tgz --workers 2 --epochs 2 2>&1 | tail -1
      echo "== round $round $kind $tree reader"
      python $root/scripts/bench/bench_reader.py --archive .cache/bd/$kind.tgz --workers 1 --seconds 8 2>&1 | tail -1
    done
  done
done
# Rounds 3 and 4 (photos only, the head tree first), run after rounds 1-2:
for round in 3 4; do
  for tree in head base; do
    root=$([ $tree = base ] && echo .cache/base53 || echo .)
    echo "== round $round photos-2000 $tree loader_cpu"
    python $root/scripts/bench/bench_loader_cpu.py --archive .cache/bd/photos-2000.tgz --workers 2 --epochs 2 2>&1 | tail -1
  done
done
