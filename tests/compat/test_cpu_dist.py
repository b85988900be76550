"""mmpar.compat.cpu_dist's mends of mmrotate 0.x's CUDA assumptions, in a process without a GPU.

The real mmrotate runs in ``test_mmrotate_end_to_end.py``; here a small package
named ``mmrotate``, written by the test, stands in for it with the two calling
patterns that the mends are for:

- ``mmrotate.apis.train.train_detector`` wraps the model itself:
  ``MMDataParallel(model.cuda(cfg.gpu_ids[0]), device_ids=cfg.gpu_ids)`` with
  ``cfg.gpu_ids = range(1)``, and ``MMDistributedDataParallel(model.cuda(),
  device_ids=[torch.cuda.current_device()], ...)``;
- ``RotatedAnchorHead.get_anchors`` calls ``grid_priors(featmap_sizes, device)``
  on a subclass of mmdet's ``AnchorGenerator``, whose second parameter is ``dtype``.

The checks run in one fresh interpreter (patching mutates ``sys.modules``; one
start of torch, mmcv and mmdet for both) with ``CUDA_VISIBLE_DEVICES=""``, and
print ``OK`` last.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.compat._mmcv_env import assert_child_ok, requires_mmdet, run_cpu_child

pytestmark = requires_mmdet

TIMEOUT = 120

FILES = {
    "mmrotate/__init__.py": "",
    "mmrotate/apis/__init__.py": "from .train import train_detector  # noqa: F401\n",
    "mmrotate/apis/train.py": """\
        import torch
        from mmcv.parallel import MMDataParallel, MMDistributedDataParallel


        def train_detector(model, gpu_ids, distributed=False):
            if distributed:
                return MMDistributedDataParallel(
                    model.cuda(), device_ids=[torch.cuda.current_device()],
                    broadcast_buffers=False)
            return MMDataParallel(model.cuda(gpu_ids[0]), device_ids=gpu_ids)
        """,
    "mmrotate/core/__init__.py": "",
    "mmrotate/core/anchor/__init__.py": "",
    "mmrotate/core/anchor/anchor_generator.py": """\
        from mmdet.core.anchor import AnchorGenerator


        class RotatedAnchorGenerator(AnchorGenerator):
            pass
        """,
}

PRELUDE = """
import torch
from tests.compat._mmcv_env import install_stand_ins
install_stand_ins()
from mmpar.compat import patch_mmcv
patch_mmcv()
assert not torch.cuda.is_available()
"""


def check(tmp_path: Path, code: str) -> None:
    for name, text in FILES.items():
        path = tmp_path / "stand_in" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    code = PRELUDE + textwrap.dedent(code) + "\nprint('OK')\n"
    assert_child_ok(run_cpu_child(code, tmp_path, [tmp_path / "stand_in"], TIMEOUT))


TRAIN = """
import os
import torch.distributed as dist
import mmcv.parallel
from mmpar import MMDataParallel, MMDistributedDataParallel
import mmrotate.apis.train as train_module
from mmrotate.apis import train_detector

assert train_detector is train_module.train_detector
model = torch.nn.Linear(2, 1)
wrapped = train_detector(model, range(1))
assert type(wrapped) is MMDataParallel and wrapped.module is model
assert wrapped(torch.ones(1, 2)).shape == (1, 1)

dist.init_process_group(
    "gloo", init_method="file://" + os.path.abspath("pg"), rank=0, world_size=1)
wrapped = train_detector(model, range(1), distributed=True)
assert type(wrapped) is MMDistributedDataParallel and wrapped.device_ids is None
assert wrapped(torch.ones(1, 2)).shape == (1, 1)
dist.destroy_process_group()

# Nothing of the mend is left behind once the function has returned.
assert "cuda" not in vars(model) and next(model.parameters()).device.type == "cpu"
assert train_module.torch is torch
assert train_module.MMDistributedDataParallel is mmcv.parallel.MMDistributedDataParallel
try:
    model.cuda()
except (RuntimeError, AssertionError):
    pass
else:
    raise AssertionError("model.cuda() outside the training function succeeded")
"""

ANCHORS = """
from mmrotate.core.anchor.anchor_generator import RotatedAnchorGenerator

gen = RotatedAnchorGenerator(strides=[16], ratios=[0.5, 1.0], scales=[3])
sizes = [(3, 4)]
(by_position,) = gen.grid_priors(sizes, torch.device("cpu"))
(by_name,) = gen.grid_priors(sizes, device="cpu")
assert by_position.device.type == "cpu" and by_position.dtype == torch.float32
assert torch.equal(by_position, by_name) and by_name.shape == (3 * 4 * 2, 4)
(half,) = gen.grid_priors(sizes, torch.float16, "cpu")
assert half.dtype == torch.float16 and torch.allclose(half.float(), by_name, atol=0.05)
(named,) = gen.grid_priors(sizes, "cpu")
assert torch.equal(named, by_name)
"""


def test_train_function_that_calls_cuda_itself_trains_on_the_cpu_and_anchors_stay_there(
    tmp_path: Path,
) -> None:
    # The anchors: a device passed where grid_priors' dtype goes is taken as the device.
    check(tmp_path, TRAIN + ANCHORS)
