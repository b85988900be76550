# An mmdet 2.x-style config for tests/compat/scripts/mmdet_style_train.py: a tiny
# detector on the small COCO set of tests/compat/_mmcv_env.py. The test passes the
# data paths with --cfg-options data.train.ann_file=... data.train.img_prefix=...
model = dict(type='TinyDetector', num_classes=3)

dataset_type = 'CocoDataset'
classes = ('cat', 'dog', 'bird')
img_norm_cfg = dict(
    mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], to_rgb=True)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', img_scale=(96, 64), keep_ratio=True),
    dict(type='RandomFlip', flip_ratio=0.5),
    dict(type='Normalize', **img_norm_cfg),
    dict(type='Pad', size_divisor=32),
    dict(type='DefaultFormatBundle'),
    dict(type='Collect', keys=['img', 'gt_bboxes', 'gt_labels']),
]
data = dict(
    samples_per_gpu=2,
    workers_per_gpu=0,
    train=dict(
        type=dataset_type,
        classes=classes,
        ann_file='',
        img_prefix='',
        pipeline=train_pipeline))

optimizer = dict(type='SGD', lr=0.01, momentum=0.9, weight_decay=0.0001)
optimizer_config = dict(grad_clip=None)
lr_config = dict(policy='step', step=[1])
runner = dict(type='EpochBasedRunner', max_epochs=2)
checkpoint_config = dict(interval=1)
log_config = dict(interval=1, hooks=[dict(type='TextLoggerHook')])
dist_params = dict(backend='gloo')
log_level = 'INFO'
workflow = [('train', 1)]
