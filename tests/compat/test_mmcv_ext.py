"""``mmcv._ext``'s raw entry points on mmpar's ops, as research code loads and calls them.

Here: multi-scale deformable attention's entry points against mmpar's op (forward, and
backward written in place into the caller's tensors) and through a research-style
autograd function; the mount, in fresh interpreters, through mmcv's own
``ext_loader.load_ext`` and mmcv 1.7.2's own wrapper modules
(``_mmcv_ext_wrappers.py``). The other families: ``test_mmcv_ext_3d.py`` and
``test_mmcv_ext_2d.py``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from mmpar.compat import mmcv_ext
from mmpar.compat.mmcv_ext import (
    attention,
    boxes2d,
)
from mmpar.compat.ops.box_iou_rotated import box_iou_rotated
from mmpar.compat.ops.multi_scale_deform_attn import multi_scale_deformable_attn_pytorch
from mmpar.compat.ops.nms import nms
from tests.compat._mmcv_env import REPO_ROOT, child_env, requires_mmcv, requires_torchvision
from tests.compat.ops._reference import DEVICES

pytestmark = [requires_torchvision]

SHAPES = [(6, 4), (3, 2)]


def _msda_inputs(device: str, dtype: torch.dtype = torch.float32, seed: int = 0) -> tuple:
    gen = torch.Generator().manual_seed(seed)
    bs, heads, dims, queries, points = 2, 2, 3, 5, 2
    shapes = torch.tensor(SHAPES, device=device)
    starts = torch.cat([shapes.new_zeros(1), (shapes[:, 0] * shapes[:, 1]).cumsum(0)[:-1]])
    keys = sum(h * w for h, w in SHAPES)
    value = torch.randn(bs, keys, heads, dims, generator=gen, dtype=dtype)
    # Some locations off the map and on its border: the zero padding's gradients too.
    locs = torch.rand(bs, queries, heads, len(SHAPES), points, 2, generator=gen, dtype=dtype)
    locs = locs * 1.2 - 0.1
    weights = torch.rand(bs, queries, heads, len(SHAPES), points, generator=gen, dtype=dtype)
    return tuple(t.to(device) for t in (value, shapes, starts, locs, weights))


@pytest.mark.parametrize("device", DEVICES)
def test_ms_deform_attn_forward_is_the_ops_forward(device: str) -> None:
    value, shapes, starts, locs, weights = _msda_inputs(device)
    out = attention.ms_deform_attn_forward(value, shapes, starts, locs, weights, im2col_step=64)
    expected = multi_scale_deformable_attn_pytorch(value, shapes, locs, weights)
    assert out.shape == (2, 5, 6) and not out.requires_grad
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_ms_deform_attn_backward_adds_autograds_gradients_in_place(device: str) -> None:
    value, shapes, starts, locs, weights = _msda_inputs(device, seed=1)
    grad_out = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(2)).to(device)
    leaves = [t.clone().requires_grad_() for t in (value, locs, weights)]
    multi_scale_deformable_attn_pytorch(leaves[0], shapes, *leaves[1:]).backward(grad_out)
    # Start from ones, not zeros: the kernel adds into what it is given.
    targets = [torch.ones_like(t) for t in (value, locs, weights)]
    pointers = [t.data_ptr() for t in targets]
    result = attention.ms_deform_attn_backward(
        value, shapes, starts, locs, weights, grad_out, *targets, im2col_step=64
    )
    assert result is None
    assert [t.data_ptr() for t in targets] == pointers
    for target, leaf in zip(targets, leaves):
        torch.testing.assert_close(target, leaf.grad + 1, rtol=1e-5, atol=1e-6)
    assert value.grad is None and not value.requires_grad


class _ResearchStyleFunction(torch.autograd.Function):
    """The autograd function BEVFormer-style code writes around the two entry points."""

    @staticmethod
    def forward(ctx, value, shapes, starts, locs, weights, im2col_step):  # type: ignore[override]
        ctx.im2col_step = im2col_step
        ctx.save_for_backward(value, shapes, starts, locs, weights)
        return attention.ms_deform_attn_forward(
            value, shapes, starts, locs, weights, im2col_step=im2col_step
        )

    @staticmethod
    def backward(ctx, grad_output):  # type: ignore[override]
        value, shapes, starts, locs, weights = ctx.saved_tensors
        grads = [torch.zeros_like(t) for t in (value, locs, weights)]
        attention.ms_deform_attn_backward(
            value,
            shapes,
            starts,
            locs,
            weights,
            grad_output.contiguous(),
            *grads,
            im2col_step=ctx.im2col_step,
        )
        return grads[0], None, None, grads[1], grads[2], None


def test_a_research_autograd_function_on_the_entry_points_passes_gradcheck() -> None:
    value, shapes, starts, locs, weights = _msda_inputs("cpu", dtype=torch.float64, seed=3)
    # Away from pixel centres: bilinear sampling is not differentiable across them.
    locs = (locs * 16).round() / 16 + 1 / 64
    inputs = [t.requires_grad_() for t in (value, locs, weights)]
    assert torch.autograd.gradcheck(
        lambda v, loc, w: _ResearchStyleFunction.apply(v, shapes, starts, loc, w, 64),
        inputs,
        eps=1e-6,
        atol=1e-5,
    )


def test_nms_entry_point_returns_the_kept_indices() -> None:
    boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 9, 10.0]])
    scores = torch.tensor([0.9, 0.8, 0.7, 0.95])
    keep = boxes2d.nms(boxes, scores, iou_threshold=0.5, offset=0)
    assert keep.tolist() == nms(boxes, scores, 0.5)[1].tolist() == [3, 2]


@pytest.mark.parametrize("aligned", [False, True])
def test_box_iou_rotated_entry_point_writes_into_ious(aligned: bool) -> None:
    gen = torch.Generator().manual_seed(4)
    boxes1 = torch.rand(4, 5, generator=gen) * torch.tensor([10, 10, 4, 4, 3.0]) + 0.5
    boxes2 = torch.rand(4, 5, generator=gen) * torch.tensor([10, 10, 4, 4, 3.0]) + 0.5
    for flag, mode in ((0, "iou"), (1, "iof")):
        ious = torch.full((4 if aligned else 16,), -1.0)
        boxes2d.box_iou_rotated(boxes1, boxes2, ious, mode_flag=flag, aligned=aligned)
        expected = box_iou_rotated(boxes1, boxes2, mode=mode, aligned=aligned)
        torch.testing.assert_close(ious, expected.reshape(-1))
    with pytest.raises(ValueError, match="mode_flag must be 0 or 1, got 2"):
        boxes2d.box_iou_rotated(boxes1, boxes2, ious, mode_flag=2, aligned=aligned)


def _run(code: str) -> subprocess.CompletedProcess:
    env = child_env()
    for name in ("MMPAR_MMCV_OPS", "MMPAR_MMCV_OPS_ANNOUNCED"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO_ROOT,
    )


@requires_mmcv
def test_load_ext_gives_mmpars_entry_points_to_mmcvs_own_wrappers() -> None:
    """mmcv 1.7.2's wrappers on mmpar's entry points give mmpar's ops' results and
    gradients; a name mmpar does not supply is one line naming it."""
    proc = _run(
        """
        from mmpar.compat import patch_mmcv, supply_mmcv_ops
        patch_mmcv()
        from mmcv.utils import ext_loader
        ext = ext_loader.load_ext("_ext", ["ms_deform_attn_forward", "ms_deform_attn_backward"])
        from mmpar.compat import mmcv_ext
        assert ext.ms_deform_attn_forward is mmcv_ext.ENTRY_POINTS["ms_deform_attn_forward"]
        # Deciding again probes mmcv's own library, not mmpar's stand-in.
        assert supply_mmcv_ops() == "mmpar"
        import mmcv._ext
        assert mmcv._ext.__mmpar_ops__
        try:
            ext_loader.load_ext("_ext", ["ms_deform_attn_forward", "bev_pool_forward"])
        except ImportError as err:
            print(type(err).__name__, "|", err)
        source = open(WRAPPERS).read()
        exec(compile(source, WRAPPERS, "exec"), {"__name__": "mmcv_ext_wrappers"})
        """.replace("WRAPPERS", repr(str(Path(__file__).with_name("_mmcv_ext_wrappers.py"))))
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    missing, mismatches = proc.stdout.strip().split("\n")
    assert missing.startswith(
        "MissingOpError | mmcv._ext.bev_pool_forward is not one of mmpar's ops"
    )
    assert mismatches == "mismatches: []"


@requires_mmcv
def test_ops_mmcv_leaves_mmcv_ext_to_mmcv() -> None:
    proc = _run(
        """
        from mmpar.compat import supply_mmcv_ops
        supply_mmcv_ops("mmpar")
        import mmcv._ext
        assert mmcv._ext.__mmpar_ops__
        supply_mmcv_ops("mmcv")
        try:
            import mmcv._ext
        except ImportError as err:
            print("mmcv's own:", type(err).__name__)
        else:
            print("still", getattr(mmcv._ext, "__mmpar_ops__", False))
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().startswith("mmcv's own: ModuleNotFoundError")


def test_every_entry_point_is_mmcv_fulls_name() -> None:
    names = set(mmcv_ext.ENTRY_POINTS)
    assert len(names) == 54
    assert {
        "hard_voxelize_forward",
        "iou3d_nms3d_forward",
        "modulated_deform_conv_backward",
        "ms_deform_attn_forward",
        "roi_align_backward",
        "knn_forward",
    } <= names


def test_the_module_answers_private_names_with_attribute_error() -> None:
    """``hasattr`` probes of every loaded module (mmcv.device.npu looks for
    ``_check_balance``) get False; a public name not supplied is the given error."""
    module = mmcv_ext.ext_module(lambda name: ImportError(f"{name} is missing"))
    assert not hasattr(module, "_check_balance") and hasattr(module, "knn_forward")
    with pytest.raises(ImportError, match=r"^mmcv\._ext\.bev_pool_forward is missing$"):
        hasattr(module, "bev_pool_forward")
