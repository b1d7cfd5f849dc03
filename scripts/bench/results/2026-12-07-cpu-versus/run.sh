set -u
# Rounds 1-2: 2026-12-01's run.sh with 3a533df as the base tree (from the repository root).
sed -e 's#\.cache/base#.cache/base53#' scripts/bench/results/2026-12-01-cpu-versus/run.sh | bash
# Rounds 3 and 4 (photos only, the head tree first), run after rounds 1-2:
for round in 3 4; do
  for tree in head base; do
    root=$([ $tree = base ] && echo .cache/base53 || echo .)
    echo "== round $round photos-2000 $tree loader_cpu"
    python $root/scripts/bench/bench_loader_cpu.py --archive .cache/bd/photos-2000.tgz --workers 2 --epochs 2 2>&1 | tail -1
  done
done
