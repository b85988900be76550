"""What mmdet3d 1.x's KITTI evaluation needs on a machine without CUDA (a test plugin).

``tests/compat/test_mmdet3d_end_to_end.py`` loads it through its configs'
``custom_imports`` (the repository root is on ``PYTHONPATH``):
:func:`mmpar.compat.kitti_rotate_iou.mend_kitti_rotate_iou` swaps mmdet3d's
``numba.cuda`` rotated IoU for mmpar's where ``numba.cuda`` finds no device.
mmdet3d's ``tools/train.py`` and ``tools/test.py`` import ``custom_imports``
before they build anything, and the evaluation imports the rotated IoU's module
only when it runs, so the swap is in place in time. Idempotent.
"""

from mmpar.compat.kitti_rotate_iou import mend_kitti_rotate_iou

mend_kitti_rotate_iou()
