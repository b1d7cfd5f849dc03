set -u
# The loader alone only, three more rounds, this tree first in each (run.sh put the base first).
for round in 3 4 5; do
  for kind in photos-2000 fixed-3000; do
    for tree in head base; do
      root=$([ $tree = base ] && echo .cache/base || echo .)
      echo "== round $round $kind $tree loader_cpu"
      python $root/scripts/bench/bench_loader_cpu.py --archive .cache/bd/$kind.tgz --workers 2 --epochs 2 2>&1 | tail -1
    done
  done
done
