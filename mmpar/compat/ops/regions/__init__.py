"""Region growing on label maps, shared by pixel_group and contour_expand.

Machinery, not one of mmcv's modules: the faces in ``mmpar.compat.ops`` import it.
"""
