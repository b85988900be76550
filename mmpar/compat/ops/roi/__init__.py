"""RoI machinery shared by the RoI ops: checked roi inputs, the bilinear sample grids of
axis-aligned and rotated bins, and their max and average pooling.

Machinery, not one of mmcv's modules: the faces in ``mmpar.compat.ops`` import it.
"""
