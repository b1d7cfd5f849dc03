# call 3 (warm after call 2): the EXIF change's owed rows: the tree before it (.cache/base,
# d5d9cc3, carried) against this one, the loader alone, 500x375 and plain photos, two rounds
o=$OUT/call3; mkdir -p $o; start=$(date +%s)
el() { echo "--- at $(( $(date +%s) - start )) s: $*"; }
for kind in fixed photos; do
  el "$kind loader alone: before EXIF (base) vs now (this)"
  BASE=.cache/base ROUNDS=2 WINDOW=8 timeout 260 bash scripts/bench/gpu_host.sh $o/v$kind versus $kind 2>&1 | grep -a "round"
done
el done
