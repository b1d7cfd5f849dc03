# call 5 (H200, warm): DALI's third piece carried; nothing run
echo "tree: $(cat .cache/calls/TREE)"; ls -la .cache/dali/*/ .cache/bench-data
