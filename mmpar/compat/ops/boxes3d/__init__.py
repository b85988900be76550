"""3D box machinery shared by mmcv's point-cloud box ops (not an mmcv module).

Boxes are mmcv's ``(x, y, z, x_size, y_size, z_size, rz)`` rows: ``rz`` the yaw
about the z axis, in radians. The faces that import this package are
:mod:`~mmpar.compat.ops.points_in_boxes`, :mod:`~mmpar.compat.ops.iou3d`,
:mod:`~mmpar.compat.ops.roiaware_pool3d` and :mod:`~mmpar.compat.ops.roipoint_pool3d`.

* :mod:`.args`: the argument checks of those ops.
* :mod:`.frame`: a point in a box's frame, and mmcv's in-box test (bottom-centre
  boxes), with its exact inequalities.
* :mod:`.pairs`: the in-box test over every (box, point) pair of a batch, in chunks
  of bounded memory: masks, or the inside pairs in (box, point) order.
* :mod:`.voxels`: which points of each roi fall in which of its voxels (RoI-aware pooling).
* :mod:`.bev_kernel`: the BEV overlap of two boxes as mmcv's ``iou3d`` kernel computes it.
* :mod:`.bev`: that overlap for every pair of two box sets, and the boxes' extents.
* :mod:`.greedy`: greedy NMS by a pairwise IoU, as mmcv's ``iou3d`` NMS kernels decide it.
"""
