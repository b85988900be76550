"""mmdet3d 1.0 on mmpar's ops: its sparse convolutions are ``mmcv.ops``' where mmpar's serve.

mmdet3d 1.0 (``mmdet3d/ops/spconv/__init__.py``) prefers spconv 2 to ``mmcv.ops``
for its sparse convolutions whenever the ``spconv`` package imports:
``register_spconv2()`` registers spconv's layers over mmcv's in mmcv's
``CONV_LAYERS``, and its sparse encoders, U-Net and Part-A2 head then import
``SparseConvTensor`` and ``SparseSequential`` from ``spconv.pytorch``. spconv 2's
layers run on CUDA only (on the CPU they ask torch for a CUDA stream), and where
mmpar's ops serve ``mmcv.ops`` they are not the ops the user chose.

:func:`mend_mmdet3d` (called by :func:`mmpar.compat.patch_mmcv`) makes that choice
answer "no spconv 2" where mmpar's ops serve ``mmcv.ops``, so that mmdet3d builds its
sparse layers from ``mmcv.ops`` as it does without spconv; where mmcv's own compiled
ops serve, or ``$MMPAR_MMDET3D_SPCONV=1``, mmdet3d chooses as it does on its own. It
imports nothing: it acts when mmdet3d's module is imported.

It also mends what stops mmdet3d on Python >= 3.8: ``MultiBackbone.forward`` (H3DNet's
backbone) renames the keys of a dict while it iterates over them, which Python 3.8 made
a ``RuntimeError`` ("dictionary keys changed during iteration"); the mended method
builds the renamed dict anew, with the same keys in the same order.

And what stops H3DNet's training on today's torch: ``H3DBboxHead.forward`` adds the
proposals' features into the output of its first refinement layer in place (``+=``),
but that output is a ReLU's, which autograd keeps for the ReLU's gradient: the backward
pass fails ("modified by an inplace operation"; H3DNet's own repository since writes
``a = a + b``). The mended head hands its first refinement layer's output on as a copy
(a forward hook), so the sum is made in the copy: the same values and gradients.

And FreeAnchor's: ``FreeAnchor3DHead.loss`` iterates over a batch tensor and writes
into the rows it gets (``bbox_preds_[matched] = ...``). Iterating a tensor unbinds it,
and today's autograd refuses writes into the views of a function that returns several
("Output 0 of Unbind is a view and is being modified inplace"). During the mended loss a
tensor is iterated row by row by indexing (views of one row each, which take writes and
pass them on to the batch, as the older torch that mmdet3d was written for did).

mmdet3d's other needs on today's Python are met elsewhere: the numpy names it reads
(``np.int``, ``np.bool``) by :mod:`mmpar.compat.numpy_aliases`, its mmcv <= 1.7.0
gate by ``python -m mmpar.compat.install --target DIR mmdet3d`` (mmcv 1.7.0 in a
folder of its own), and its numba 0.53 pin by that installer's choice of a numba
for the installed numpy (mmdet3d uses ``numba.core``, which newer numba keeps).
"""

from __future__ import annotations

import contextlib
import functools
import os
from types import ModuleType
from typing import Any, Callable, Dict, Iterator

from mmpar.compat.import_hook import on_import
from mmpar.compat.mmcv_ops import ops_in_use

__all__ = [
    "FREE_ANCHOR_MODULE",
    "H3D_HEAD_MODULE",
    "MULTI_BACKBONE_MODULE",
    "SPCONV_ENV_VAR",
    "SPCONV_MODULE",
    "mend_mmdet3d",
    "multi_backbone_forward",
    "uses_spconv2",
]

#: The module whose ``register_spconv2`` decides whether mmdet3d uses spconv 2.
SPCONV_MODULE = "mmdet3d.ops.spconv.overwrite_spconv.write_spconv2"
#: The module of ``MultiBackbone`` (H3DNet).
MULTI_BACKBONE_MODULE = "mmdet3d.models.backbones.multi_backbone"
#: The module of ``FreeAnchor3DHead``.
FREE_ANCHOR_MODULE = "mmdet3d.models.dense_heads.free_anchor3d_head"
#: The module of ``H3DBboxHead``.
H3D_HEAD_MODULE = "mmdet3d.models.roi_heads.bbox_heads.h3d_bbox_head"
#: ``1``: let mmdet3d use spconv 2 (where it imports) even where mmpar's ops serve mmcv.ops.
SPCONV_ENV_VAR = "MMPAR_MMDET3D_SPCONV"


def uses_spconv2() -> bool:
    """Whether mmdet3d may choose spconv 2 over ``mmcv.ops``' sparse convolutions here."""
    return os.environ.get(SPCONV_ENV_VAR) == "1" or ops_in_use() != "mmpar"


def _mend_register(module: ModuleType) -> None:
    """Make the module's ``register_spconv2`` register nothing unless :func:`uses_spconv2`."""
    register: Callable[[], Any] = module.register_spconv2
    if getattr(register, "__mmpar_mended__", False):
        return

    @functools.wraps(register)
    def register_spconv2() -> Any:
        return register() if uses_spconv2() else False

    register_spconv2.__mmpar_mended__ = True  # type: ignore[attr-defined]
    module.register_spconv2 = register_spconv2


def multi_backbone_forward(self: Any, points: Any) -> Dict[str, Any]:
    """``MultiBackbone.forward``: each backbone's outputs under ``<key>_<suffix>``, and
    ``hd_feature``, the aggregation of their last feature-propagation features.

    Args:
        points: (B, N, 3 + C) float: the points and their features.

    Returns:
        The outputs of every backbone, renamed, and ``hd_feature``.
    """
    import torch

    merged: Dict[str, Any] = {}
    last = []
    for backbone, suffix in zip(self.backbone_list, self.suffixes):
        out = backbone(points)
        last.append(out["fp_features"][-1])
        merged.update({(f"{k}_{suffix}" if suffix else k): v for k, v in out.items()})
    merged["hd_feature"] = self.aggregation_layers(torch.cat(last, dim=1))
    return merged


def _mend_multi_backbone(module: ModuleType) -> None:
    cls = module.MultiBackbone
    if not getattr(cls.forward, "__mmpar_mended__", False):
        multi_backbone_forward.__mmpar_mended__ = True  # type: ignore[attr-defined]
        cls.forward = multi_backbone_forward


def _copy_output(module: Any, inputs: Any, output: Any) -> Any:
    return output.clone()


def _mend_h3d_head(module: ModuleType) -> None:
    cls = module.H3DBboxHead
    forward = cls.forward
    if getattr(forward, "__mmpar_mended__", False):
        return

    @functools.wraps(forward)
    def mended(self: Any, *args: Any, **kwargs: Any) -> Any:
        first = self.bbox_pred[0]
        if not getattr(first, "__mmpar_copies__", False):
            first.register_forward_hook(_copy_output)
            first.__mmpar_copies__ = True
        return forward(self, *args, **kwargs)

    mended.__mmpar_mended__ = True  # type: ignore[attr-defined]
    cls.forward = mended


def _rows(tensor: Any) -> Iterator[Any]:
    return (tensor[i] for i in range(len(tensor)))


@contextlib.contextmanager
def _rows_by_index() -> Iterator[None]:
    """Tensors iterate by indexing (one-row views that take writes) inside the block."""
    import torch

    saved = torch.Tensor.__iter__
    torch.Tensor.__iter__ = _rows
    try:
        yield
    finally:
        torch.Tensor.__iter__ = saved


def _mend_free_anchor(module: ModuleType) -> None:
    cls = module.FreeAnchor3DHead
    loss = cls.loss
    if getattr(loss, "__mmpar_mended__", False):
        return

    @functools.wraps(loss)
    def mended(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _rows_by_index():
            return loss(self, *args, **kwargs)

    mended.__mmpar_mended__ = True  # type: ignore[attr-defined]
    cls.loss = mended


def mend_mmdet3d() -> None:
    """Mend mmdet3d's choice of sparse convolutions, its ``MultiBackbone``,
    ``H3DBboxHead`` and ``FreeAnchor3DHead`` when (or if already) their modules are
    imported."""
    on_import(SPCONV_MODULE, _mend_register)
    on_import(MULTI_BACKBONE_MODULE, _mend_multi_backbone)
    on_import(H3D_HEAD_MODULE, _mend_h3d_head)
    on_import(FREE_ANCHOR_MODULE, _mend_free_anchor)
