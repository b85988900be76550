"""Running a model over a test set, on one device or over a process group, and scoring it."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

import torch
from torch import nn
from torch.utils.data import DataLoader

from mmpar.dist import collect_results, get_dist_info
from mmpar.evaluation import eval_map

__all__ = [
    "class_rows",
    "eval_samples_per_gpu",
    "evaluate_map",
    "multi_gpu_test",
    "run_inference",
    "single_gpu_test",
]


def _run(model: nn.Module, data_loader: DataLoader) -> List[Any]:
    results: List[Any] = []
    model.eval()
    with torch.no_grad():
        for data in data_loader:
            results.extend(model(return_loss=False, rescale=True, **data))
    return results


def single_gpu_test(model: nn.Module, data_loader: DataLoader) -> List[Any]:
    """Per-image results of ``model`` (e.g. an ``MMDataParallel``) over the whole loader.

    Args:
        model: Called as ``model(return_loss=False, rescale=True, **batch)``; it must
            return one result per image of the batch.
        data_loader: A loader with a sequential sampler.

    Returns:
        One result per image, in loader order; the model is left in eval mode.

    Raises:
        ValueError: the model returned a different number of results than images.
    """
    results = _run(model, data_loader)
    expected = len(data_loader.dataset)  # type: ignore[arg-type]
    if len(results) != expected:
        raise ValueError(f"single_gpu_test: got {len(results)} results for {expected} images")
    return results


def multi_gpu_test(model: nn.Module, data_loader: DataLoader) -> List[Any]:
    """Per-image results over a dataset split across the ranks of a process group.

    Each rank runs its share (the loader's ``DistributedSampler``), then
    :func:`mmpar.dist.collect_results` puts every result at its dataset index,
    dropping the samples the sampler repeated to even out the ranks. Every rank must
    call it (a collective).

    Returns:
        ``len(dataset)`` results in dataset order, on every rank.

    Raises:
        ValueError: the number of results on a rank differs from its sampler's indices.
    """
    # The batch sampler (torch's, around the sampler, or a group sampler) yields
    # exactly the indices this rank processes, in order.
    indices = [int(i) for batch in data_loader.batch_sampler for i in batch]
    results = _run(model, data_loader)
    if len(indices) != len(results):
        rank, _ = get_dist_info()
        raise ValueError(
            f"multi_gpu_test: rank {rank} got {len(results)} results for {len(indices)} sampled "
            "images"
        )
    return collect_results(results, len(data_loader.dataset), indices)  # type: ignore[arg-type]


def evaluate_map(dataset: Any, results: Sequence[Any], iou_thr: float = 0.5) -> Dict[str, Any]:
    """mAP of per-image detections against ``dataset.get_ann_info(i)``.

    Returns:
        ``dict(mAP=float, per_class=[dict(class, num_gts, num_dets, recall, ap), ...])``.

    Raises:
        ValueError: the number of results differs from the dataset's length.
    """
    if len(results) != len(dataset):
        raise ValueError(
            f"evaluate_map: {len(results)} results for a dataset of {len(dataset)} images"
        )
    annotations = [dataset.get_ann_info(i) for i in range(len(dataset))]
    classes = getattr(dataset, "CLASSES", None) or None
    names = (
        list(classes)
        if classes is not None and results and len(classes) == len(results[0])
        else None
    )
    mean_ap, per_class = eval_map(list(results), annotations, iou_thr=iou_thr, class_names=names)
    return {"mAP": mean_ap, "per_class": per_class}


def run_inference(model: nn.Module, data_loader: DataLoader, distributed: bool) -> List[Any]:
    """Per-image results over the whole dataset, in dataset order (all ranks', when distributed)."""
    return (
        multi_gpu_test(model, data_loader) if distributed else single_gpu_test(model, data_loader)
    )


def class_rows(metrics: Dict[str, Any]) -> List[str]:
    """One readable line per class of :func:`evaluate_map`'s result."""
    return [
        f"  class {row['class']}: ap {row['ap']:.4f}, recall {row['recall']:.4f}, "
        f"gts {row['num_gts']}, dets {row['num_dets']}"
        for row in metrics["per_class"]
    ]


def eval_samples_per_gpu(data_cfg: Any) -> int:
    """Samples per GPU in tests: ``data.test_samples_per_gpu``, else ``data.samples_per_gpu``."""
    return int(data_cfg.get("test_samples_per_gpu") or data_cfg.samples_per_gpu)
