# one piece of DALI's wheels carried (nothing run): what the host holds so far
ls -la .cache/dali/*/ .cache/bench-data 2>&1 | head -20
