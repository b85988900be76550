"""One wrapper registry in practice: each side's checkpoint code unwraps the other side's wrappers.

Each case runs in a fresh interpreter, because which of mmpar and mmcv.parallel
is imported first is the point of the test.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.compat._mmcv_env import REPO_ROOT, child_env, requires_mmcv

pytestmark = requires_mmcv

_PRELUDE = """
import os, sys, tempfile, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {root!r})
from tests.compat._mmcv_env import install_stand_ins
install_stand_ins()
import torch
from torch import nn
"""

_WRAPPER = """
class Wrapper(nn.Module):
    def __init__(self, module):
        super().__init__()
        self.module = module
"""

_MMPAR_SIDE = (
    _WRAPPER
    + """
import mmpar
mmpar.MODULE_WRAPPERS.register_module(name="Wrapper", module=Wrapper)
"""
)

_MMCV_SIDE = (
    _WRAPPER
    + """
from mmcv.parallel import MODULE_WRAPPERS
from mmcv.utils import Registry
CHILD = Registry("my wrappers", parent=MODULE_WRAPPERS, scope="mine")
CHILD.register_module(module=Wrapper)
"""
)

_CHECK = """
import mmpar
from mmcv.parallel import is_module_wrapper
from mmcv.runner import save_checkpoint
from mmpar.runner import save_checkpoint as mmpar_save
wrapped = Wrapper(nn.Linear(2, 2))
assert mmpar.is_module_wrapper(wrapped) and is_module_wrapper(wrapped)
assert mmpar.unwrap_module(wrapped) is wrapped.module
path = os.path.join(tempfile.mkdtemp(), "ckpt.pth")
save_checkpoint(wrapped, path)
print(sorted(torch.load(path, weights_only=False)["state_dict"]))
mmpar_save(path, wrapped)
print(sorted(torch.load(path, weights_only=True)["state_dict"]))
"""


def _run(body: str) -> str:
    code = _PRELUDE.format(root=str(REPO_ROOT)) + textwrap.dedent(body)
    proc = subprocess.run(
        [sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.parametrize(
    "order",
    ["import mmpar\nimport mmcv.parallel\n", "import mmcv.parallel\nimport mmpar\n"],
    ids=["mmpar-first", "mmcv-first"],
)
@pytest.mark.parametrize(
    "side", [_MMPAR_SIDE, _MMCV_SIDE], ids=["registered-in-mmpar", "registered-in-mmcv-child"]
)
def test_both_sides_unwrap_a_wrapper_registered_on_either_side(order: str, side: str) -> None:
    out = _run(order + side + _CHECK)
    assert out.splitlines() == ["['bias', 'weight']"] * 2


@pytest.mark.parametrize(
    "side", [_MMPAR_SIDE, _MMCV_SIDE], ids=["registered-in-mmpar", "registered-in-mmcv-child"]
)
def test_under_patch_mmcv_child_registries_work_and_both_sides_unwrap(side: str) -> None:
    out = _run("from mmpar.compat import patch_mmcv\npatch_mmcv()\n" + side + _CHECK)
    assert out.splitlines() == ["['bias', 'weight']"] * 2
