# TinyDet on SyntheticShapes: trains in well under a minute on a 2-core CPU and
# reaches a clearly non-trivial mAP@0.5 (see docs/tools.md).
_base_ = [
    "../_base_/models/tiny_det.py",
    "../_base_/datasets/synthetic_shapes.py",
    "../_base_/schedules/schedule_12e.py",
    "../_base_/default_runtime.py",
]
# mAP@0.5 on the val split before training, every 4 epochs and after the last (epochs
# 0, 4, 8, 12): a curve for plot_log.py, for a fraction of an epoch per evaluation. The
# last evaluation before the end comes before the lr step at epoch 10, so the curve ends
# at its best. From epoch 9 on, the mAP of 64 images swings by 0.01-0.02 from one epoch
# to the next, so an evaluation at epoch 9 (interval=3) could come out above the last.
evaluation = dict(interval=4)
