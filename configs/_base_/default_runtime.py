# What every run shares: checkpoints, logging, evaluation, seeding, resuming.
# epoch_N.pth every N epochs (and after the last); latest.pth -> newest
checkpoint_config = dict(interval=1)
# a log line (and a JSON record) every 4 iterations and at each epoch end
log_config = dict(interval=4)
# interval 0: evaluate at the end only
evaluation = dict(interval=0, before_train=True, metric="mAP")
# backend None: nccl with CUDA, gloo without. timeout: seconds a collective waits
# for a peer before the run fails (a hung or dead rank is reported, not waited on).
dist_params = dict(backend=None, timeout=600)
find_unused_parameters = False
log_level = "INFO"
seed = None  # None: a random seed, shared by all ranks and saved in the checkpoints
deterministic = False
load_from = None
resume_from = None
