"""Planar geometry shared by the rotated and polygon ops: rotated-box corners, convex
intersection areas, convex hulls, quadrilaterals and their pairwise overlaps.

Machinery, not one of mmcv's modules: the faces in ``mmpar.compat.ops`` import it.
"""
