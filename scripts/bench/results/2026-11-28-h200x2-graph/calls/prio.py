"""train_resnet.py with the loader's side streams (lanes, split helper) at CUDA priority $PRIO."""
import os
import runpy
import sys

sys.path.insert(0, os.getcwd())
import imageloader.prefetch as prefetch  # noqa: E402

prefetch.SIDE_STREAM_PRIORITY = int(os.environ["PRIO"])
sys.argv = ["scripts/train_resnet.py"] + sys.argv[1:]
runpy.run_path("scripts/train_resnet.py", run_name="__main__")
