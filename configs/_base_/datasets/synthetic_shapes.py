# SyntheticShapes: images of 64-96 px with 1-4 filled shapes of 3 classes, made in memory.
# Train, val and test are disjoint (different seeds). The pipelines are the dataset's
# defaults: flip (train only), ImageNet normalization, DataContainers with size_divisor=32
# (the workers do not pad: collate pads each image once, into the batch, to multiples of 32).
# normalize_on_device="auto": with CUDA the loader ships uint8 images and mmpar's wrappers
# normalize them on the GPU after scatter (the same batch, a quarter of the bytes); without
# CUDA, in the loader.
dataset_type = "SyntheticShapes"
norm_on_device = "auto"
data = dict(
    samples_per_gpu=16,
    workers_per_gpu=0,
    test_samples_per_gpu=16,
    train=dict(type=dataset_type, num_samples=256, min_size=64, max_size=96, num_classes=3, seed=0,
             normalize_on_device=norm_on_device),
    val=dict(type=dataset_type, num_samples=64, min_size=64, max_size=96, num_classes=3, seed=1,
             normalize_on_device=norm_on_device),
    test=dict(type=dataset_type, num_samples=128, min_size=64, max_size=96, num_classes=3, seed=2,
             normalize_on_device=norm_on_device),
)
