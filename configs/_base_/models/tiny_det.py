# TinyDet: CenterNet-style heatmap/size/offset heads at stride 4 on a small conv backbone.
model = dict(
    type="TinyDet",
    num_classes=3,
    width=32,
    norm_cfg=dict(type="BN"),
    loss_weights=dict(heatmap=1.0, size=0.1, offset=1.0),
    max_per_img=50,
    score_thr=0.01,
)
