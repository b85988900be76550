"""mmdet3d's KITTI evaluation on a machine without CUDA: its rotated IoU in plain torch.

mmdet3d 1.x (1.0.0rc6) evaluates KITTI-format results (``KittiDataset.evaluate``,
``mmdet3d.core.evaluation.kitti_eval``) with the rotated bird's-eye-view overlaps of
``mmdet3d.core.evaluation.kitti_utils.rotate_iou.rotate_iou_gpu_eval``, a
``numba.cuda`` kernel: without a CUDA driver the evaluation of any 3D detector
stops there: the module compiles its kernel for the current device on import
(``CudaSupportError: Error at driver init``), after a whole training. The
evaluation imports the module lazily, at each call, and uses nothing else of it.

:func:`mend_kitti_rotate_iou` answers that import, where ``numba.cuda`` has no
device, with a module whose ``rotate_iou_gpu_eval`` is :func:`rotate_iou_eval`: the same definition,
computed with :func:`mmpar.compat.ops.box_iou_rotated.box_iou_rotated` (batched,
chunked torch on the CPU). The definition, as the kernel computes it:

- a box ``(x, y, dx, dy, angle)`` has the corners ``(x, y) + R (+-dx/2, +-dy/2)``
  with ``R = [[cos, sin], [-sin, cos]]`` (clockwise for a positive angle in x-right,
  y-up axes: mmcv's ``clockwise=False``);
- ``out[n, k]`` compares ``boxes[n]`` with ``query_boxes[k]``; with ``inter`` the
  area of their intersection, ``a_box = dx * dy`` of ``boxes[n]`` and ``a_query``
  of ``query_boxes[k]``: criterion ``-1`` gives ``inter / (a_box + a_query -
  inter)``, ``0`` gives ``inter / a_query`` and ``1`` gives ``inter / a_box`` (the
  kernel's ``rbox1`` is the query box), any other value ``inter``;
- float32 in and out, no epsilon: a pair with a box of area 0 intersects in 0, and
  a ratio over a zero area is NaN (0 / 0), as in the kernel. NaN coordinates give
  what ``box_iou_rotated`` gives them (its pre-check finds no overlap: 0), where
  the kernel's clipping gives NaN or 0 by the branch it takes.

Differences: the areas are computed in float64 and rounded to float32 once (the
kernel rounds each step to float32: results agree to about 1e-6);
``device_id`` is accepted and ignored.
"""

from __future__ import annotations

import sys
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Callable, Optional, Sequence

import numpy as np

__all__ = ["ROTATE_IOU_MODULE", "mend_kitti_rotate_iou", "rotate_iou_eval"]

#: The module of mmdet3d's CUDA-only rotated IoU; the evaluation imports it lazily.
ROTATE_IOU_MODULE = "mmdet3d.core.evaluation.kitti_utils.rotate_iou"


def rotate_iou_eval(
    boxes: np.ndarray, query_boxes: np.ndarray, criterion: int = -1, device_id: int = 0
) -> np.ndarray:
    """mmdet3d's ``rotate_iou_gpu_eval``, on the CPU (see the module docstring).

    Args:
        boxes: ``(N, 5)`` array ``(x, y, dx, dy, angle)``, any real dtype (read as float32).
        query_boxes: ``(K, 5)`` array, same layout.
        criterion: ``-1`` IoU, ``0`` intersection over the query box's area, ``1``
            over the box's area, anything else the intersection's area.
        device_id: The CUDA device of the original; ignored.

    Returns:
        ``(N, K)`` float32 array.

    Raises:
        ValueError: ``boxes`` or ``query_boxes`` is not of shape ``(n, 5)``.
    """
    import torch

    from mmpar.compat.ops.box_iou_rotated import box_iou_rotated

    b = _as_boxes("boxes", boxes)
    q = _as_boxes("query_boxes", query_boxes)
    if len(b) == 0 or len(q) == 0:
        return np.zeros((len(b), len(q)), dtype=np.float32)
    b64, q64 = (torch.from_numpy(x.astype(np.float64)) for x in (b, q))
    area_b = (b64[:, 2] * b64[:, 3])[:, None]
    area_q = (q64[:, 2] * q64[:, 3])[None, :]
    # Intersection over the query box's area, times that area (a pair with a box of
    # area 0 intersects in 0, as the kernel's clipping gives).
    inter = box_iou_rotated(q64, b64, mode="iof", clockwise=False).T * area_q
    with np.errstate(divide="ignore", invalid="ignore"):
        if criterion == -1:
            out = inter / (area_b + area_q - inter)
        elif criterion == 0:
            out = inter / area_q
        elif criterion == 1:
            out = inter / area_b
        else:
            out = inter
    return out.numpy().astype(np.float32)


def _as_boxes(name: str, boxes: np.ndarray) -> np.ndarray:
    array = np.asarray(boxes, dtype=np.float32)
    if array.ndim != 2 or array.shape[1] != 5:
        raise ValueError(
            f"rotate_iou_eval: {name} must have shape (n, 5) (x, y, dx, dy, angle), "
            f"got {array.shape}"
        )
    return array


def _cuda_usable() -> bool:
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:  # numba missing or broken: mmdet3d's kernel cannot run either
        return False


class _Finder(MetaPathFinder, Loader):
    """Answers the import of :data:`ROTATE_IOU_MODULE` where ``numba.cuda`` has no device."""

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[ModuleSpec]:
        if fullname != ROTATE_IOU_MODULE or _cuda_usable():
            return None
        return ModuleSpec(fullname, self)

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = ModuleType(spec.name)
        module.__doc__ = f"mmpar's stand-in for {spec.name} (see {__name__})."
        module.rotate_iou_gpu_eval = _as_original(rotate_iou_eval)
        return module

    def exec_module(self, module: ModuleType) -> None:
        pass


def _as_original(function: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def rotate_iou_gpu_eval(boxes, query_boxes, criterion=-1, device_id=0):
        return function(boxes, query_boxes, criterion, device_id)

    rotate_iou_gpu_eval.__doc__ = function.__doc__
    return rotate_iou_gpu_eval


def mend_kitti_rotate_iou() -> None:
    """Serve the import of mmdet3d's rotated-IoU module with :func:`rotate_iou_eval`.

    Where ``numba.cuda`` finds no device (decided at that import), ``import``
    of :data:`ROTATE_IOU_MODULE` gives a module whose ``rotate_iou_gpu_eval`` is
    :func:`rotate_iou_eval`: mmdet3d's own module cannot even be imported there,
    since it compiles its kernel for the current device on import. Elsewhere
    mmdet3d's module is imported as usual. An import made before this call is
    left as it is. Idempotent; imports neither mmdet3d nor numba.
    """
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
