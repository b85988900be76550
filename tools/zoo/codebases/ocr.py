"""mmocr 0.x: text detectors, text recognizers, and key information extraction.

The samples come from the tail of each config's own pipelines (see
``ocr_samples``); Mask R-CNN for text takes mmdet's batch. A detector's test result
is one ``boundary_result`` per image (polygons, each ending in its score), a
recognizer's one ``text`` with its ``score``, SDMGR's the ``nodes`` and ``edges``
class probabilities of its boxes.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from mmpar_zoo.batch import make_batches as detection_batches
from mmpar_zoo.codebase import Codebase, StageError, form
from mmpar_zoo.codebases import ocr_samples as samples
from mmpar_zoo.config import dicts
from mmpar_zoo.needs import Needs

#: Segmentation-based text detectors: their targets come from ``*Targets`` transforms.
TEXT_DETECTORS = ("DBNet", "PANet", "PSENet", "FCENet", "DRRG", "TextSnake")


def kind(cfg: Any) -> str:
    """``textdet``, ``maskrcnn``, ``kie``, ``ner`` or ``textrecog``."""
    model = cfg.model.get("type")
    if model in TEXT_DETECTORS:
        return "textdet"
    return {"OCRMaskRCNN": "maskrcnn", "SDMGR": "kie", "NerClassifier": "ner"}.get(
        model, "textrecog"
    )


def pipeline(cfg: Any, split: str) -> List[dict]:
    """The first pipeline under ``data.<split>`` (wrappers and concatenations included)."""
    for node in dicts((cfg.get("data") or {}).get(split)):
        if isinstance(node.get("pipeline"), list):
            return list(node["pipeline"])
    raise ValueError(f"the config has no {split} pipeline under data.{split}")


def _channels(cfg: Any) -> int:
    loads = [t for t in pipeline(cfg, "train") if t.get("type") == "LoadImageFromFile"]
    return 1 if loads and loads[0].get("color_type") == "grayscale" else 3


class MMOCR(Codebase):
    """mmocr 0.x (``build_detector``, which builds its recognizers and extractors too)."""

    name = "mmocr"
    package = "mmocr"
    distribution = "mmocr"
    install = "pip install 'mmocr<1'"
    modules = ("mmocr.models", "mmocr.datasets", "mmdet.models")

    def builder(self, cfg: Any) -> Any:
        from mmocr.models import build_detector

        return build_detector(
            cfg.model, train_cfg=cfg.get("train_cfg"), test_cfg=cfg.get("test_cfg")
        )

    def make_batches(self, cfg: Any, seed: int) -> Tuple[Any, Any, Any]:
        """Two training samples and one test sample, by the config's pipelines.

        Raises:
            ValueError: The model is a named entity recognizer (text, not images).
        """
        import numpy as np

        from mmpar import collate

        what = kind(cfg)
        if what == "maskrcnn":
            return (*detection_batches(Needs(cfg), seed), (what, None))
        if what == "ner":
            raise ValueError("the tool makes no batch for NerClassifier (text, not images)")
        rng = np.random.default_rng(seed)
        classes = int(cfg.model.bbox_head.num_classes) if what == "kie" else None
        channels = _channels(cfg)

        def make(index: int) -> Any:
            if what == "textdet":
                return samples.text_detection(rng, index)
            if what == "kie":
                return samples.receipt(rng, index, classes)
            return samples.text_line(rng, index, channels)

        train_tail = samples.tail(pipeline(cfg, "train"))
        train = [samples.run(train_tail, make(i)) for i in range(2)]
        if what == "textdet":
            test = samples.detection_test(pipeline(cfg, "test"), rng)
        else:
            test = samples.run(samples.tail(pipeline(cfg, "test")), make(0))
        return (
            collate(train, samples_per_gpu=2),
            collate([test], samples_per_gpu=1),
            (what, classes),
        )

    def check_result(self, output: Any, expect: Any, data: Any) -> None:
        """One entry (one image) of the form of its kind (see the module's docstring)."""
        what, classes = expect
        if not isinstance(output, list) or len(output) != 1:
            raise StageError(f"expected a list of 1 result (one image), got {form(output)}")
        entry = output[0]
        if not isinstance(entry, dict):
            raise StageError(f"expected a dict, got {form(entry)}")
        if what in ("textdet", "maskrcnn"):
            _check_boundaries(entry.get("boundary_result"))
        elif what == "kie":
            _check_kie(entry, classes)
        elif not isinstance(entry.get("text"), str) or "score" not in entry:
            raise StageError(f"expected 'text' (a string) and 'score', got keys {sorted(entry)}")


def _check_boundaries(found: Optional[Any]) -> None:
    if not isinstance(found, list):
        raise StageError(f"expected 'boundary_result', a list of polygons, got {form(found)}")
    for i, polygon in enumerate(found):
        if len(polygon) < 7 or len(polygon) % 2 != 1:
            raise StageError(
                f"boundary {i} has {len(polygon)} numbers, expected x, y pairs then a score"
            )


def _check_kie(entry: dict, classes: int) -> None:
    nodes, edges = entry.get("nodes"), entry.get("edges")
    if nodes is None or edges is None:
        raise StageError(f"expected 'nodes' and 'edges', got keys {sorted(entry)}")
    count = nodes.shape[0]
    if tuple(nodes.shape) != (count, classes) or tuple(edges.shape) != (count * count, 2):
        raise StageError(
            f"nodes {tuple(nodes.shape)} and edges {tuple(edges.shape)}, expected "
            f"({count}, {classes}) and ({count * count}, 2)"
        )
