# call 6 (H200, warm): DALI's fourth piece carried; nothing run
echo "tree: $(cat .cache/calls/TREE)"; ls -la .cache/dali/*/ .cache/bench-data
