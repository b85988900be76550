"""Voxel machinery shared by the voxel ops: the cell of each point as mmcv's kernels
compute it, integer keys for rows of voxel coordinates, and the grouping of equal keys
in the order of their first appearance.

Machinery, not one of mmcv's modules: the faces in ``mmpar.compat.ops`` (``voxelize``,
``scatter_points``) import it.
"""
