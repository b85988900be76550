# TinyDet on SyntheticShapes: trains in well under a minute on a 2-core CPU and
# reaches a clearly non-trivial mAP@0.5 (see docs/tools.md).
_base_ = [
    "../_base_/models/tiny_det.py",
    "../_base_/datasets/synthetic_shapes.py",
    "../_base_/schedules/schedule_12e.py",
    "../_base_/default_runtime.py",
]
# mAP@0.5 on the val split before training, every 3 epochs and after the last (epochs
# 0, 3, 6, 9, 12): a curve for plot_log.py, for a fraction of an epoch per evaluation.
evaluation = dict(interval=3)
