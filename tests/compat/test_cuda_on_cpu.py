"""mmpar.compat.cuda_on_cpu: a plugin's GridMask, which moves its mask with ``.cuda()``, on the CPU.

A small package written by the test stands in for the research repositories'
``projects/mmdet3d_plugin/models/utils/grid_mask.py``: its ``GridMask.forward``
draws a mask with numpy and calls ``torch.from_numpy(mask).float().cuda()``, as
DETR3D's and the four repositories built on it do. The checks run in fresh
interpreters with ``CUDA_VISIBLE_DEVICES=""`` and print ``OK`` last.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

from tests.compat._mmcv_env import assert_child_ok, requires_mmcv, run_cpu_child

pytestmark = requires_mmcv

TIMEOUT = 120

GRID_MASK = """\
    import numpy as np
    import torch
    from torch import nn


    class GridMask(nn.Module):
        def forward(self, x):
            if not self.training:
                return x
            n, c, h, w = x.shape
            mask = np.ones((h, w), np.float32)
            mask[::2, :] = 0
            mask = torch.from_numpy(mask).float().cuda()
            return x * mask.expand_as(x)
    """

PACKAGES = ("projects", "projects/mmdet3d_plugin", "projects/mmdet3d_plugin/models")

PRELUDE = """
import torch
assert not torch.cuda.is_available()
x = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
"""


def run(tmp_path: Path, code: str) -> subprocess.CompletedProcess:
    for folder in PACKAGES + ("projects/mmdet3d_plugin/models/utils",):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "projects/mmdet3d_plugin/models/utils/grid_mask.py").write_text(
        textwrap.dedent(GRID_MASK)
    )
    code = PRELUDE + textwrap.dedent(code) + "\nprint('OK')\n"
    return run_cpu_child(code, tmp_path, [tmp_path], TIMEOUT)


def check(tmp_path: Path, code: str) -> None:
    assert_child_ok(run(tmp_path, code))


def test_stand_in_fails_unpatched(tmp_path: Path) -> None:
    """Without the mend the stand-in stops where the repositories' first training step does."""
    proc = run(
        tmp_path,
        """
        from projects.mmdet3d_plugin.models.utils.grid_mask import GridMask
        GridMask().train()(x)
        """,
    )
    assert proc.returncode != 0
    assert "RuntimeError" in proc.stderr or "AssertionError" in proc.stderr, proc.stderr[-2000:]


def test_grid_mask_runs_on_the_cpu_after_patch_mmcv(tmp_path: Path) -> None:
    check(
        tmp_path,
        """
        original = torch.Tensor.cuda
        from mmpar.compat import patch_mmcv
        patch_mmcv()
        from projects.mmdet3d_plugin.models.utils import grid_mask

        out = grid_mask.GridMask().train()(x)
        expected = x.clone()
        expected[:, :, ::2, :] = 0
        assert out.device.type == "cpu" and torch.equal(out, expected)
        assert grid_mask.GridMask().eval()(x) is x

        # Outside the method .cuda() is torch's again, and still refuses.
        assert torch.Tensor.cuda is original
        try:
            x.cuda()
        except (RuntimeError, AssertionError):
            pass
        else:
            raise AssertionError("x.cuda() outside GridMask.forward succeeded")
        """,
    )


def test_tensor_cuda_stays_is_reentrant(tmp_path: Path) -> None:
    check(
        tmp_path,
        """
        from mmpar.compat.cuda_on_cpu import tensor_cuda_stays

        original = torch.Tensor.cuda
        with tensor_cuda_stays():
            with tensor_cuda_stays():
                assert x.cuda() is x and x.cuda(0, non_blocking=True) is x
            assert x.cuda() is x
        assert torch.Tensor.cuda is original
        try:
            with tensor_cuda_stays():
                raise KeyError("inside")
        except KeyError:
            pass
        assert torch.Tensor.cuda is original
        """,
    )


FP16 = """
from types import SimpleNamespace

from mmpar.compat import patch_mmcv
patch_mmcv()
from mmcv.runner import Fp16OptimizerHook, auto_fp16


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 2, 1)
        self.fp16_enabled = False

    @auto_fp16(apply_to=("img",))
    def forward(self, img):
        return self.conv(img)


torch.manual_seed(0)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
runner = SimpleNamespace(model=model, optimizer=optimizer, meta={}, outputs={})
runner.log_buffer = SimpleNamespace(update=lambda *args, **kwargs: None)
hook = Fp16OptimizerHook(loss_scale=512.0, grad_clip=dict(max_norm=35, norm_type=2))
before = model.conv.weight.detach().clone()
hook.before_run(runner)
img = torch.rand(1, 3, 4, 4)
out = model(img)
assert out.dtype == torch.float32 and torch.allclose(out, model.conv(img))
runner.outputs = {"loss": out.square().mean(), "num_samples": 1}
hook.after_train_iter(runner)
assert not torch.equal(model.conv.weight, before)  # a step was taken, in fp32
assert model.conv.weight.dtype == torch.float32
"""


def test_fp16_optimizer_hook_trains_in_fp32_without_a_gpu(tmp_path: Path) -> None:
    """PETR's ``Fp16OptimizerHook``: unmended, ``auto_fp16`` meets half inputs and float weights."""
    check(tmp_path, FP16)


def test_fp16_stand_in_fails_unmended(tmp_path: Path) -> None:
    unmended = (
        "patch_mmcv()\nimport mmpar.compat.cuda_on_cpu as c\nc.no_accelerator = lambda: False\n"
    )
    code = FP16.replace("patch_mmcv()\n", unmended)
    proc = run(tmp_path, code)
    assert proc.returncode != 0 and "Half" in proc.stderr, proc.stderr[-2000:]
