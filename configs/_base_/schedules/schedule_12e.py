# 12 epochs of AdamW with a linear warmup and a x0.1 step at epoch 10. The length
# leaves a margin: gradient accumulation (optimizer_config.cumulative_iters=2)
# halves the optimizer steps on the same schedule and still converges.
optimizer = dict(type="AdamW", lr=3e-3, weight_decay=1e-4)
optimizer_config = dict(grad_clip=dict(max_norm=10.0))
lr_config = dict(
    policy="step", step=[10], gamma=0.1, warmup="linear", warmup_iters=16, warmup_ratio=0.1
)
runner = dict(max_epochs=12)
# --auto-scale-lr scales optimizer.lr by (samples_per_gpu * processes) / base_batch_size.
auto_scale_lr = dict(base_batch_size=16)
