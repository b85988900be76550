# TinyDet on SyntheticShapes: trains in about half a minute of CPU time (one thread) to
# mAP@0.5 0.97-0.99 (docs/tools.md has the figures and the commands).
_base_ = [
    "../_base_/models/tiny_det.py",
    "../_base_/datasets/synthetic_shapes.py",
    "../_base_/schedules/schedule_12e.py",
    "../_base_/default_runtime.py",
]
# mAP@0.5 on the val split before training, every 4 epochs and after the last (epochs
# 0, 4, 8, 12): a curve for plot_log.py, for a fraction of an epoch per evaluation. The
# last evaluation before the end comes before the lr step at epoch 10, so the curve ends
# at its best. From epoch 9 on, the mAP of 64 images falls as well as rises, by up to
# 0.015 between epochs, so an evaluation at epoch 9 (interval=3) can beat the last one.
evaluation = dict(interval=4)
