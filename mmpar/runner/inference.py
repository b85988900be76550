"""Running a model over a test set, on one device or over a process group, and scoring it."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import torch
from torch import nn
from torch.utils.data import DataLoader

from mmpar.dist import collect_results, get_dist_info
from mmpar.evaluation import BBOX_KEYS, coco_bbox_eval, eval_map, results_to_coco
from mmpar.evaluation.coco_bbox import import_pycocotools
from mmpar.runner.progress import Progress

__all__ = [
    "METRICS",
    "check_metrics",
    "class_rows",
    "detail_lines",
    "eval_samples_per_gpu",
    "evaluate_coco_bbox",
    "evaluate_map",
    "evaluate_results",
    "headline",
    "metric_names",
    "multi_gpu_test",
    "result_lines",
    "run_inference",
    "scalar_metrics",
    "single_gpu_test",
]

#: The metrics a test or an evaluation can ask for: ``mAP`` (mAP@0.5, VOC-style, any
#: dataset with ``get_ann_info``) and ``bbox`` (COCO AP through pycocotools, on a
#: COCO-format dataset).
METRICS: Tuple[str, ...] = ("mAP", "bbox")


def _run(model: nn.Module, data_loader: DataLoader, total: int, step: int = 1) -> List[Any]:
    """Results of this process's batches; ``step`` images counted per image done
    (the world size: rank 0's share stands for every rank's)."""
    results: List[Any] = []
    progress = Progress(total)
    model.eval()
    try:
        with torch.no_grad():
            for data in data_loader:
                out = model(return_loss=False, rescale=True, **data)
                results.extend(out)
                progress.update(len(out) * step)
    finally:
        progress.close()
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
    expected = len(data_loader.dataset)  # type: ignore[arg-type]
    results = _run(model, data_loader, expected)
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
    _, world_size = get_dist_info()
    results = _run(model, data_loader, len(data_loader.dataset), world_size)  # type: ignore[arg-type]
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


def metric_names(value: Any) -> List[str]:
    """``evaluation.metric`` (or ``--eval``) as a list: one name or a list of names.

    Raises:
        TypeError: neither a str nor a list of str.
        ValueError: a name not among :data:`METRICS`, or no name.
    """
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"expected a metric name or a list of them, got {value!r}")
    if not names:
        raise ValueError(f"no metric given; expected among {list(METRICS)}")
    bad = [n for n in names if n not in METRICS]
    if bad:
        raise ValueError(f"unsupported {bad}; expected among {list(METRICS)}")
    return list(dict.fromkeys(names))


def check_metrics(metrics: Sequence[str], dataset: Any = None) -> None:
    """Fail before any inference if ``metrics`` cannot be computed.

    ``bbox`` needs pycocotools and (when ``dataset`` is given) a COCO-format dataset:
    one with ``coco_ground_truth()``, ``img_ids`` and ``cat_ids``, as
    :class:`~mmpar.data.datasets.CocoDetection` has.

    Raises:
        MissingDependencyError: ``bbox`` without pycocotools (an ``ImportError``).
        ValueError: ``bbox`` on a dataset without COCO annotations, or whose
            annotation file has none.
    """
    if "bbox" not in metrics:
        return
    import_pycocotools()
    if dataset is not None:
        _check_coco_dataset(dataset)
        dataset.coco_ground_truth()  # the file has annotations, and still reads


def _check_coco_dataset(dataset: Any) -> None:
    missing = [
        name for name in ("coco_ground_truth", "img_ids", "cat_ids") if not hasattr(dataset, name)
    ]
    if missing:
        raise ValueError(
            f"metric 'bbox' (COCO AP) needs a COCO-format dataset, such as CocoDetection with "
            f"an annotation file; {type(dataset).__name__} has no {', '.join(missing)}: use "
            "'mAP' (mAP@0.5) for it"
        )


def evaluate_coco_bbox(dataset: Any, results: Sequence[Any]) -> Dict[str, Any]:
    """COCO box AP of per-image detections, through pycocotools.

    Result ``i`` belongs to ``dataset.img_ids[i]``; label ``c`` is category
    ``dataset.cat_ids[c]``; boxes ``[x1, y1, x2, y2]`` become ``[x, y, w, h]``. The
    ground truth is ``dataset.coco_ground_truth()``, evaluated over the dataset's
    images and categories only.

    Returns:
        ``bbox_mAP``, ``bbox_mAP_50``, ``bbox_mAP_75``, ``bbox_mAP_s``, ``bbox_mAP_m``,
        ``bbox_mAP_l`` (floats), ``bbox_mAP_copypaste`` (the six at 3 decimals) and
        ``bbox_summary`` (pycocotools' table).

    Raises:
        ValueError: another number of results than images, a dataset without COCO
            annotations.
        MissingDependencyError: pycocotools is not installed.
    """
    _check_coco_dataset(dataset)
    if len(results) != len(dataset):
        raise ValueError(
            f"evaluate_coco_bbox: {len(results)} results for a dataset of {len(dataset)} images"
        )
    img_ids, cat_ids = list(dataset.img_ids), list(dataset.cat_ids)
    detections = results_to_coco(results, img_ids, cat_ids)
    metrics, summary = coco_bbox_eval(dataset.coco_ground_truth(), detections, img_ids, cat_ids)
    metrics["bbox_summary"] = summary
    return metrics


def evaluate_results(
    dataset: Any, results: Sequence[Any], metrics: Sequence[str] = ("mAP",)
) -> Dict[str, Any]:
    """Every metric of ``metrics`` (see :data:`METRICS`) in one dict.

    ``mAP``: :func:`evaluate_map`'s keys; ``bbox``: :func:`evaluate_coco_bbox`'s.
    """
    out: Dict[str, Any] = {}
    if "mAP" in metrics:
        out.update(evaluate_map(dataset, results))
    if "bbox" in metrics:
        out.update(evaluate_coco_bbox(dataset, results))
    return out


def scalar_metrics(metrics: Dict[str, Any]) -> Dict[str, float]:
    """The figures of :func:`evaluate_results`'s dict (what the JSON log records)."""
    return {key: metrics[key] for key in ("mAP",) + BBOX_KEYS if key in metrics}


def headline(metrics: Dict[str, Any]) -> Tuple[str, float]:
    """The main figure: ``("mAP@0.5", mAP)`` when there, else ``("bbox_mAP", ...)``."""
    if "mAP" in metrics:
        return "mAP@0.5", metrics["mAP"]
    return "bbox_mAP", metrics["bbox_mAP"]


def detail_lines(metrics: Dict[str, Any]) -> List[str]:
    """The per-class rows of mAP@0.5 and pycocotools' table, whichever are there."""
    lines = class_rows(metrics) if "per_class" in metrics else []
    if "bbox_summary" in metrics:
        lines += metrics["bbox_summary"].splitlines()
    return lines


def result_lines(metrics: Dict[str, Any]) -> List[str]:
    """The figures as ``tools/test.py`` prints them, after :func:`detail_lines`:
    ``mAP@0.5: x``; ``bbox_mAP: x, bbox_mAP_50: x, ...`` and ``bbox_mAP_copypaste: ...``."""
    lines = []
    if "mAP" in metrics:
        lines.append(f"mAP@0.5: {metrics['mAP']:.4f}")
    if "bbox_mAP" in metrics:
        lines.append(", ".join(f"{key}: {metrics[key]:.4f}" for key in BBOX_KEYS))
        lines.append(f"bbox_mAP_copypaste: {metrics['bbox_mAP_copypaste']}")
    return lines


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
