"""The NMS engine shared by the nms faces: argument checks, class-offset batching, rotated
and quadrilateral NMS, and soft-NMS (its kernel, levels, rounds and box pairs).

Machinery, not one of mmcv's modules: the faces in ``mmpar.compat.ops`` import it.
"""
