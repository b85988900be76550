"""Bilinear deformable sampling shared by the deformable convolutions, masked conv and
multi-scale deformable attention.

Machinery, not one of mmcv's modules: the faces in ``mmpar.compat.ops`` import it.
"""
