"""A script written for the torch 1.x ``torch.distributed.launch``: it knows ``--local_rank`` only.

Its argument handling is that of mmdet 2.x's ``tools/train.py`` (and of the paper
repositories forked from it): ``--local_rank`` with a default of 0, copied into
``LOCAL_RANK`` only when the launcher did not set it, then mmcv's ``init_dist``.
It joins a gloo group, checks it with an all_reduce, and writes what it saw to
``<out>/rank<RANK>.json``.
"""

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from tests.compat._mmcv_env import install_stand_ins  # noqa: E402

install_stand_ins()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from mmcv.runner import get_dist_info, init_dist  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description="an old training script")
    parser.add_argument("out", help="folder for the reports")
    parser.add_argument("--launcher", choices=["none", "pytorch"], default="none")
    parser.add_argument("--local_rank", type=int, default=0)
    args = parser.parse_args()
    if "LOCAL_RANK" not in os.environ:
        os.environ["LOCAL_RANK"] = str(args.local_rank)
    return args


def main():
    args = parse_args()
    if torch.cuda.is_available():
        init_dist(args.launcher, backend="gloo")
    else:
        # mmcv's init_dist divides by the GPU count: without a GPU, join directly.
        dist.init_process_group(backend="gloo", timeout=datetime.timedelta(seconds=60))
    rank, world_size = get_dist_info()
    total = torch.tensor([rank + 1])
    dist.all_reduce(total)
    report = {
        "argv": sys.argv[1:],
        "rank": rank,
        "world_size": world_size,
        "local_rank_env": os.environ["LOCAL_RANK"],
        "sum": int(total),
    }
    (Path(args.out) / f"rank{rank}.json").write_text(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
