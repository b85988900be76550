#!/usr/bin/env python3
"""Run every config of mmdet 2.x's model zoo for one training step and one test batch.

For each config (``<model dir>/<name>.py`` under ``--configs-root``, ``_base_``
excluded) the tool builds the model without pretrained weights (nothing is
downloaded), makes a small random batch of what the config's train pipeline
collects (boxes, labels, and masks, proposals or semantic maps where the model
takes them), batches it with ``mmpar.collate`` as mmdet's pipelines emit it,
runs one training step through ``mmpar.MMDataParallel`` on the CPU (forward,
losses, backward: the loss must be finite, some gradient non-zero) and one test
batch of one image (``return_loss=False, rescale=True``), whose result must have
mmdet's form (per-class boxes, ``(bbox, segm)`` or panoptic dicts). mmcv's
compiled ops are not needed: ``--ops`` chooses whose ops serve ``mmcv.ops``
(see ``mmpar.compat.patch_mmcv``).

The images are small (120x150 and 90x120, padded as the config pads, larger
where the architecture needs it), and so, unless --config-rois, R-CNN heads
sample at most 32 RoIs per training image and keep at most 100 detections per
test image, and RPNs keep at most 200 proposals: the same code runs on fewer
boxes. fp16 settings are not applied (CPU, float32).

Examples::

    python tools/mmdet_zoo.py --jobs 2 --json zoo.json
    python tools/mmdet_zoo.py --one-per-dir --jobs 2
    python tools/mmdet_zoo.py --dirs faster_rcnn,mask_rcnn --filter r50 --by-dir
    python tools/mmdet_zoo.py --from-json zoo.json --by-dir

One line per config, as it finishes::

    PASS  faster_rcnn/faster_rcnn_r50_fpn_1x_coco.py  build 0.4s train 1.2s test 0.3s
    FAIL  libra_rcnn/libra_faster_rcnn_r50_fpn_1x_coco.py  train: AttributeError: ...
    SKIP  convnext/mask_rcnn_convnext-t_p4_w7_fpn_fp16_ms-crop_3x_coco.py  needs mmcls

then a summary: the counts and the pass rate over the counted configs (skipped
ones, which need a package mmdet does not install or hold no model, are listed
and not counted). Each config runs in its own child process (forked from this
one where the platform can), so that no global state (registries, torch
threads) leaks from one config into the next; one that runs past ``--timeout``
is stopped and fails. Exit status: 0 when every counted config passed, 1
otherwise. A user error (no mmdet, a bad option) ends the run with one line
``error: ...`` on stderr and exit status 2 (--debug: the full traceback).

Configs are Python and run as code: only use config folders you trust.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import logging
import math
import multiprocessing
import multiprocessing.connection
import os
import random
import sys
import time
import traceback
import warnings
from collections import OrderedDict, deque
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, NoReturn, Optional, Sequence, Tuple

if importlib.util.find_spec("mmpar") is None:  # a source checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: Packages some configs use that installing mmdet does not install: those configs are skipped.
OPTIONAL_PACKAGES = ("mmcls", "timm", "sklearn")
#: Image sizes (height, width) of the training batch, before padding: the second is
#: smaller, so that collate pads it to the first. The test batch is the first.
SHAPES = ((120, 150), (90, 120))
#: RoIs an R-CNN head samples per training image, at most (the configs say 128 to 512; the
#: images are small). ``--config-rois`` keeps the configs' numbers.
RCNN_ROIS = 32
#: Proposals an RPN keeps per image, at most (the configs say 300 to 2000).
RPN_PROPOSALS = 200
#: Detections an R-CNN head keeps per test image, at most (LVIS configs say 300).
DETECTIONS = 100
#: Size divisors the architecture needs whatever its pipeline pads to.
TYPE_DIVISORS = {"HourglassNet": 128, "NASFPN": 128, "FPG": 128}
#: What ``mmcv.runner``'s checkpoint loader refuses in the child: nothing may be downloaded.
NO_CHECKPOINT = (
    "the zoo run loads no checkpoint (found {!r}): every pretrained weight should have been "
    "stripped from the config"
)


# --------------------------------------------------------------------------- arguments


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--configs-root",
        help="folder of model directories (default: the installed mmdet's .mim/configs)",
    )
    parser.add_argument("--dirs", help="comma-separated model directories to run (default: all)")
    parser.add_argument(
        "--one-per-dir",
        action="store_true",
        help="only the first config (sorted by name) of each model directory",
    )
    parser.add_argument("--filter", help="only configs whose relative path contains this")
    parser.add_argument(
        "--jobs", type=_positive_int, default=1, help="configs run at once (default 1)"
    )
    parser.add_argument(
        "--timeout",
        type=_positive_float,
        default=300.0,
        help="seconds one config may take before it is stopped and fails (default 300)",
    )
    parser.add_argument("--json", metavar="OUT", help="write every config's result to OUT")
    parser.add_argument(
        "--ops",
        choices=("auto", "mmcv", "mmpar"),
        default="auto",
        help="whose ops serve mmcv.ops (mmpar.compat.patch_mmcv): auto (mmcv's own where "
        "they load, else mmpar's), mmcv, mmpar",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed of every config")
    parser.add_argument(
        "--config-rois",
        action="store_true",
        help=f"keep the configs' numbers of sampled RoIs, proposals and detections (default: "
        f"at most {RCNN_ROIS} RoIs per training image and {DETECTIONS} detections per test "
        f"image for R-CNN heads, {RPN_PROPOSALS} proposals per image)",
    )
    parser.add_argument(
        "--by-dir",
        action="store_true",
        help="also print the results by model directory, as a markdown table",
    )
    parser.add_argument(
        "--from-json",
        metavar="FILE",
        help="run nothing: print the summary (and --by-dir table) of an earlier --json file",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="on a user error (bad option, mmdet's models not importing) show the full "
        "traceback instead of one 'error: ...' line",
    )
    return parser.parse_args(argv)


def fail(message: str) -> NoReturn:
    """Print ``error: message`` (on one line) to stderr and exit with status 2.

    As ``mmpar.runner.cli.fail`` does; here without importing mmpar (and torch), so
    that a bad option is refused at once.
    """
    print(f"error: {' '.join(message.split())}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return value


# --------------------------------------------------------------------------- selection


def default_configs_root() -> Path:
    """The installed mmdet's ``.mim/configs``, found without importing mmdet."""
    spec = importlib.util.find_spec("mmdet")
    if spec is None or not spec.submodule_search_locations:
        fail(
            "mmdet is not installed; install mmdet 2.x (pip install 'mmdet<3'), or give "
            "--configs-root"
        )
    return Path(list(spec.submodule_search_locations)[0]) / ".mim" / "configs"


def find_configs(root: Path) -> Dict[str, List[str]]:
    """Model directory -> its config paths relative to ``root``, sorted."""
    found: Dict[str, List[str]] = {}
    for path in sorted(root.glob("*/*.py")):
        directory = path.parent.name
        if directory.startswith(("_", ".")):
            continue
        found.setdefault(directory, []).append(path.relative_to(root).as_posix())
    return found


def select_configs(args: argparse.Namespace, root: Path) -> List[str]:
    """The configs to run, in sorted order; a bad selection is a user error."""
    if not root.is_dir():
        fail(f"--configs-root: {root} is not a directory")
    found = find_configs(root)
    if not found:
        fail(f"--configs-root: {root} holds no model directory with configs (<dir>/<name>.py)")
    dirs = sorted(found)
    if args.dirs is not None:
        asked = [d.strip().strip("/") for d in args.dirs.split(",") if d.strip()]
        unknown = [d for d in asked if d not in found]
        if unknown or not asked:
            fail(
                f"--dirs: no model directory {', '.join(map(repr, unknown)) or repr(args.dirs)} "
                f"under {root} (there are {len(found)}: {', '.join(dirs[:8])}, ...)"
            )
        dirs = sorted(set(asked))
    chosen: List[str] = []
    for directory in dirs:
        paths = [p for p in found[directory] if args.filter is None or args.filter in p]
        chosen += paths[:1] if args.one_per_dir else paths
    if not chosen:
        fail(f"--filter: no config path contains {args.filter!r} in the chosen directories")
    return chosen


# --------------------------------------------------------------------------- the config


def load_config(path: Path) -> Any:
    """The config with mmdet's own compatibility passes, custom imports not yet made."""
    from mmcv import Config

    cfg = Config.fromfile(str(path), import_custom_modules=False)
    try:
        from mmdet.utils import compat_cfg, replace_cfg_vals

        cfg = replace_cfg_vals(cfg)
        if "data" in cfg:  # compat_cfg reads it
            cfg = compat_cfg(cfg)
    except ImportError:  # older mmdet 2.x
        pass
    return cfg


def needed_package(cfg: Any) -> Optional[str]:
    """An optional package the config needs and this machine lacks (custom_imports, types)."""
    names: List[str] = list((cfg.get("custom_imports") or {}).get("imports") or [])
    for node in _dicts(cfg.get("model")):
        if isinstance(node.get("type"), str) and "." in node["type"]:
            names.append(node["type"])
    for name in names:
        root = name.split(".")[0]
        if root in OPTIONAL_PACKAGES and importlib.util.find_spec(root) is None:
            return root
    return None


def import_custom_modules(cfg: Any) -> None:
    for name in (cfg.get("custom_imports") or {}).get("imports") or []:
        importlib.import_module(name)


def _dicts(tree: Any) -> Iterator[dict]:
    """Every dict in a config tree, shallower ones first (breadth first)."""
    queue = deque([tree])
    while queue:
        node = queue.popleft()
        if isinstance(node, dict):
            yield node
            queue.extend(node.values())
        elif isinstance(node, (list, tuple)):
            queue.extend(node)


def _is_pretrained(init: Any) -> bool:
    return isinstance(init, dict) and init.get("type") == "Pretrained"


def strip_pretrained(model_cfg: Any, configs_root: Path) -> None:
    """Drop every pretrained weight from a model config, in place.

    ``pretrained`` keys, ``init_cfg`` entries of type ``Pretrained``, every
    backbone's ``init_cfg``, and teachers' checkpoints (a teacher's config is
    loaded, stripped the same way, and given inline).
    """
    for node in list(_dicts(model_cfg)):
        node.pop("pretrained", None)
        init = node.get("init_cfg")
        if _is_pretrained(init):
            node["init_cfg"] = None
        elif isinstance(init, (list, tuple)):
            node["init_cfg"] = [i for i in init if not _is_pretrained(i)] or None
        if isinstance(node.get("backbone"), dict):
            node["backbone"]["init_cfg"] = None
        if "teacher_ckpt" in node:
            node["teacher_ckpt"] = None
        if isinstance(node.get("teacher_config"), str):
            teacher = load_config(_teacher_path(node["teacher_config"], configs_root))
            strip_pretrained(teacher.model, configs_root)
            node["teacher_config"] = dict(model=teacher.model)


def _teacher_path(path: str, configs_root: Path) -> Path:
    """mmdet's configs name teachers from the repository root: ``configs/<dir>/<name>.py``."""
    candidate = Path(path)
    if candidate.is_file():
        return candidate
    parts = candidate.parts
    if parts and parts[0] == "configs":
        return configs_root.joinpath(*parts[1:])
    return configs_root / candidate


# --------------------------------------------------------------------------- what the model takes


def _pipeline_transforms(dataset_cfg: Any) -> Tuple[List[dict], Optional[dict]]:
    """Every transform of a dataset config's pipelines (wrappers included) and its Collect.

    The Collect is the outermost one (the shallowest): a dataset wrapper's
    (``MultiImageMixDataset``) pipeline runs last.
    """
    transforms = [n for n in _dicts(dataset_cfg) if isinstance(n.get("type"), str)]
    collect = next((t for t in transforms if t["type"] == "Collect"), None)
    return transforms, collect


class Needs:
    """What one config's model takes: the batch's keys, mask kind, sizes, classes.

    Read from the config's train and test pipelines (``Collect`` keys,
    ``LoadAnnotations``/``LoadPanopticAnnotations`` flags, ``SegRescale``,
    ``Pad``) and from the model config (class counts, fixed input sizes).
    """

    def __init__(self, cfg: Any) -> None:
        data = cfg.get("data") or {}
        train, collect = _pipeline_transforms(data.get("train"))
        self.keys: List[str] = (
            list(collect["keys"]) if collect else ["img", "gt_bboxes", "gt_labels"]
        )
        loads = [t for t in train if t["type"] in ("LoadAnnotations", "LoadPanopticAnnotations")]
        self.polygons = any(t.get("with_mask") and t.get("poly2mask") is False for t in loads)
        # Semantic maps: LoadAnnotations reads PNGs (uint8); LoadPanopticAnnotations makes
        # them from panopticapi's ids (int32).
        panoptic = any(t["type"] == "LoadPanopticAnnotations" for t in loads)
        self.seg_dtype = "int32" if panoptic else "uint8"
        # Fixed-size resizing or padding, or batches of one image: every image of a batch
        # has the same shape (YOLACT, SSD) or padded shape (Mask2Former, MaskFormer) in
        # training, and some heads rely on it.
        self.same_shape = any(t["type"] == "Resize" and t.get("keep_ratio") is False for t in train)
        self.same_pad = (
            self.same_shape
            or any(t["type"] == "Pad" and t.get("size") for t in train)
            or _samples_per_gpu(data) == 1
        )
        rescale = [t for t in train if t["type"] == "SegRescale"]
        self.seg_scale = float(rescale[0].get("scale_factor", 1)) if rescale else 1.0
        _, test_collect = _pipeline_transforms(data.get("test"))
        self.test_keys: List[str] = list(test_collect["keys"]) if test_collect else ["img"]
        self.meta_keys: Optional[List[str]] = (
            list(test_collect["meta_keys"])
            if test_collect and "meta_keys" in test_collect
            else None
        )
        model = cfg.model
        self.divisor = _divisor(train, model)
        self.fixed_size = _fixed_input_size(model)
        self.things, self.seg_classes = _class_counts(model)

    def shapes(self) -> List[Tuple[Tuple[int, int], Tuple[int, int]]]:
        """(image shape, padded shape) of each training image (the test image is the first)."""
        if self.fixed_size is not None:
            side = (self.fixed_size, self.fixed_size)
            return [(side, side)] * len(SHAPES)
        found = []
        for base in SHAPES[:1] * len(SHAPES) if self.same_shape else SHAPES:
            pad = tuple(int(math.ceil(s / self.divisor) * self.divisor) for s in base)
            found.append((base, found[0][1] if found and self.same_pad else (pad[0], pad[1])))
        return found


def _samples_per_gpu(data: Any) -> Optional[int]:
    """Images per GPU in training (mmdet's compat_cfg moves it into ``train_dataloader``)."""
    return (data.get("train_dataloader") or {}).get("samples_per_gpu", data.get("samples_per_gpu"))


def _divisor(train: List[dict], model: Any) -> int:
    divisor = 32
    for t in train:
        if t["type"] == "Pad" and (t.get("size_divisor") or 0) > 1:
            divisor = max(divisor, int(t["size_divisor"]))
    for node in _dicts(model):
        divisor = max(divisor, TYPE_DIVISORS.get(str(node.get("type")), 0))
    return divisor


def _fixed_input_size(model: Any) -> Optional[int]:
    """The input side of a model made for one input size (SSD's anchor generator)."""
    for node in _dicts(model):
        if isinstance(node.get("input_size"), int) and "anchor" in str(node.get("type")).lower():
            return int(node["input_size"])
    return None


def _class_counts(model: Any) -> Tuple[int, int]:
    """(thing classes of the boxes' labels, classes of the semantic map)."""
    things = stuff = None
    counts: List[int] = []
    semantic: List[int] = []
    for node in _dicts(model):
        if isinstance(node.get("num_things_classes"), int):
            things = node["num_things_classes"]
            stuff = node.get("num_stuff_classes", 0)
    for key, value in _items(model):
        if key[-1] != "num_classes" or not isinstance(value, int):
            continue
        if "semantic_head" in key:
            semantic.append(value)
        elif "rpn_head" not in key:
            counts.append(value)
    if things is None:
        things = min(counts) if counts else 1
    seg_classes = things + stuff if stuff is not None else (min(semantic) if semantic else things)
    return things, seg_classes


def _items(tree: Any, key: Tuple[str, ...] = ()) -> Iterator[Tuple[Tuple[str, ...], Any]]:
    """(key path, value) of every leaf of a config tree."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _items(v, key + (str(k),))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from _items(v, key + (str(i),))
    else:
        yield key, tree


# --------------------------------------------------------------------------- the batch

IMG_NORM = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], to_rgb=True)


def _boxes(rng: Any, shape: Tuple[int, int], count: int) -> Any:
    """``count`` random boxes (count, 4) float32 x1, y1, x2, y2 inside an image of ``shape``."""
    import numpy as np

    h, w = shape
    size = rng.uniform(0.15, 0.5, (count, 2)) * np.array([w, h])
    corner = rng.uniform(0, 1, (count, 2)) * (np.array([w, h]) - size)
    return np.concatenate([corner, corner + size], axis=1).astype(np.float32)


def _masks(boxes: Any, pad: Tuple[int, int], polygons: bool) -> Any:
    """One mask per box: the ellipse inscribed in it (mmdet's BitmapMasks or PolygonMasks)."""
    import numpy as np
    from mmdet.core import BitmapMasks, PolygonMasks

    angles = np.linspace(0, 2 * np.pi, 12, endpoint=False)
    outlines = []
    for x1, y1, x2, y2 in boxes:
        cx, cy, rx, ry = (x1 + x2) / 2, (y1 + y2) / 2, (x2 - x1) / 2, (y2 - y1) / 2
        points = np.stack([cx + rx * np.cos(angles), cy + ry * np.sin(angles)], axis=1)
        outlines.append(points.reshape(-1))
    if polygons:
        return PolygonMasks([[p] for p in outlines], *pad)
    ys, xs = np.mgrid[: pad[0], : pad[1]] + 0.5
    bitmaps = [
        ((xs - (x1 + x2) / 2) / max((x2 - x1) / 2, 1)) ** 2
        + ((ys - (y1 + y2) / 2) / max((y2 - y1) / 2, 1)) ** 2
        <= 1
        for x1, y1, x2, y2 in boxes
    ]
    return BitmapMasks(np.stack(bitmaps).astype(np.uint8), *pad)


def _meta(index: int, shape: Tuple[int, int], pad: Tuple[int, int], scale: float) -> dict:
    """An image's meta as mmdet's Collect gives it (``ori_shape`` = ``img_shape`` / ``scale``)."""
    import numpy as np

    h, w = shape
    ori = (int(round(h / scale)), int(round(w / scale)))
    factor = np.array([w / ori[1], h / ori[0]] * 2, dtype=np.float32)
    return dict(
        filename=f"zoo_{index}.jpg",
        ori_filename=f"zoo_{index}.jpg",
        ori_shape=ori + (3,),
        img_shape=(h, w, 3),
        pad_shape=pad + (3,),
        scale_factor=factor,
        flip=False,
        flip_direction=None,
        img_norm_cfg={k: np.array(v, dtype=np.float32) for k, v in IMG_NORM.items()},
        border=np.array([0, h, 0, w], dtype=np.float32),
    )


def _image(rng: Any, shape: Tuple[int, int], pad: Tuple[int, int]) -> Any:
    """A normalized random image (3, *pad), zero in the padding, as Normalize and Pad leave it."""
    import torch

    img = torch.zeros(3, *pad)
    img[:, : shape[0], : shape[1]] = torch.from_numpy(rng.standard_normal((3,) + shape)).float()
    return img


def train_sample(
    needs: Needs, rng: Any, index: int, shape: Tuple[int, int], pad: Tuple[int, int]
) -> dict:
    """One sample of the train batch, as mmdet's DefaultFormatBundle and Collect emit it.

    Args:
        needs: What the model takes.
        rng: numpy's random generator.
        index: The image's place in the batch.
        shape: (height, width) of the image.
        pad: (height, width) it is padded to.
    """
    import torch

    from mmpar import DataContainer as DC

    boxes = _boxes(rng, shape, 3)
    sample: Dict[str, Any] = {}
    for key in needs.keys:
        if key == "img":
            sample[key] = DC(_image(rng, shape, pad), stack=True)
        elif key == "gt_bboxes":
            sample[key] = DC(torch.from_numpy(boxes))
        elif key == "gt_labels":
            sample[key] = DC(torch.from_numpy(rng.integers(0, needs.things, len(boxes))))
        elif key == "gt_masks":
            sample[key] = DC(_masks(boxes, pad, needs.polygons), cpu_only=True)
        elif key == "gt_semantic_seg":
            size = tuple(int(round(s * needs.seg_scale)) for s in pad)
            seg = rng.integers(0, needs.seg_classes, size).astype(needs.seg_dtype)
            sample[key] = DC(torch.from_numpy(seg[None]), padding_value=255, stack=True)
        elif key == "proposals":
            sample[key] = DC(torch.from_numpy(_proposals(rng, boxes, shape)))
        elif key == "gt_bboxes_ignore":
            sample[key] = DC(torch.zeros(0, 4))
        else:
            raise ValueError(f"the train pipeline collects {key!r}, which the tool cannot make")
    sample["img_metas"] = DC(_meta(index, shape, pad, 1.0), cpu_only=True)
    return sample


def _proposals(rng: Any, boxes: Any, shape: Tuple[int, int]) -> Any:
    """Proposals (N, 4) float32: the boxes jittered, and random ones (as LoadProposals gives)."""
    import numpy as np

    jittered = boxes + rng.normal(0, 4, (8,) + boxes.shape).astype(np.float32)
    others = _boxes(rng, shape, 40)
    found = np.concatenate([jittered.reshape(-1, 4), others])
    found[:, 0::2] = found[:, 0::2].clip(0, shape[1] - 1)
    found[:, 1::2] = found[:, 1::2].clip(0, shape[0] - 1)
    found[:, 2:] = np.maximum(found[:, 2:], found[:, :2] + 1)
    return found.astype(np.float32)


def test_sample(needs: Needs, rng: Any, shape: Tuple[int, int], pad: Tuple[int, int]) -> dict:
    """One test sample as MultiScaleFlipAug emits it: lists of one augmentation."""
    import torch

    from mmpar import DataContainer as DC

    meta = _meta(0, shape, pad, 0.8)
    if needs.meta_keys is not None:
        meta = {k: meta[k] for k in needs.meta_keys if k in meta}
    sample: Dict[str, Any] = {
        "img": [_image(rng, shape, pad)],
        "img_metas": [DC(meta, cpu_only=True)],
    }
    for key in needs.test_keys:
        if key == "proposals":
            boxes = _boxes(rng, shape, 3)
            sample[key] = [DC(torch.from_numpy(_proposals(rng, boxes, shape)))]
        elif key != "img":
            raise ValueError(f"the test pipeline collects {key!r}, which the tool cannot make")
    return sample


# --------------------------------------------------------------------------- one config


class StageError(Exception):
    """A check of a stage that did not hold (the message says which)."""


def _no_downloads() -> None:
    """Make every checkpoint load (and so every download) an error in this process."""
    import torch.hub
    from mmcv.runner.checkpoint import CheckpointLoader

    def refuse(filename: Any, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(NO_CHECKPOINT.format(filename))

    CheckpointLoader.load_checkpoint = classmethod(lambda cls, filename, *a, **k: refuse(filename))
    torch.hub.load_state_dict_from_url = refuse
    torch.hub.download_url_to_file = refuse


def _seed(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _timed(result: Dict[str, Any], stage: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, its wall time put in ``result["times"]``, its CPU time in ``result["cpu"]``."""
    start, cpu = time.perf_counter(), time.process_time()
    out = fn()
    result["times"][stage] = time.perf_counter() - start
    result["cpu"][stage] = time.process_time() - cpu
    return out


def run_config(
    path: Path, rel: str, configs_root: Path, seed: int, config_rois: bool = False
) -> Dict[str, Any]:
    """Build, train one step and test one batch; the result as a JSON-able dict."""
    result: Dict[str, Any] = {"config": rel, "dir": rel.split("/")[0], "times": {}, "cpu": {}}
    stage = "config"
    try:
        _no_downloads()
        _seed(seed)
        cfg = load_config(path)
        if "model" not in cfg:
            return dict(result, status="SKIP", reason="no model (a dataset or schedule config)")
        package = needed_package(cfg)
        if package is not None:
            return dict(result, status="SKIP", reason=f"needs {package}")
        stage = "build"
        import_custom_modules(cfg)
        model = _timed(result, "build", lambda: build_model(cfg, configs_root, config_rois))
        stage = "batch"
        needs = Needs(cfg)
        train_data, test_data = make_batches(needs, seed)
        stage = "train"
        _timed(result, "train", lambda: train_step(model, train_data))
        stage = "test"
        output = _timed(result, "test", lambda: test_step(model, test_data))
        stage = "check"
        check_result(output, needs, test_data)
    except Exception as exc:
        package = _missing_optional(exc)
        if package is not None:
            return dict(result, status="SKIP", reason=f"needs {package}")
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
        return dict(
            result,
            status="FAIL",
            stage=stage,
            error=f"{type(exc).__name__}: {_explain(_one_line(exc))}",
            traceback="".join(lines)[-4000:],
        )
    return dict(result, status="PASS")


def _one_line(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(
        (str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)).split()
    )
    if len(text) > limit:
        return text[: limit - 3] + "..."
    return text or "(no message)"


def _explain(message: str) -> str:
    """Say what torch's message in a forked child means where there is no GPU at all.

    ``import mmcv`` queries CUDA, so torch calls every forked child a bad fork for
    CUDA and answers its first CUDA call so, not with "no GPU".
    """
    import torch

    if "re-initialize CUDA in forked subprocess" in message and torch.cuda.device_count() == 0:
        return f"the model calls CUDA, and this machine has no GPU (torch: {message})"
    return message


def _missing_optional(exc: BaseException) -> Optional[str]:
    """The optional package (mmcls, timm, sklearn) whose absence ``exc`` reports, if any."""
    text = str(exc)
    name = getattr(exc, "name", None) or ""
    for package in OPTIONAL_PACKAGES:
        if isinstance(exc, ImportError) and (
            name.split(".")[0] == package or f"pip install {package}" in text
        ):
            return package
        if isinstance(exc, KeyError) and f"{package}." in text and "not in the" in text:
            return package
    return None


def limit_rois(cfg: Any) -> None:
    """At most :data:`RCNN_ROIS` sampled RoIs and :data:`RPN_PROPOSALS` proposals per
    image, and :data:`DETECTIONS` per test image of an R-CNN head.

    Sizes only: the same code runs, on fewer boxes (the images are small).
    """
    for holder in (cfg, cfg.model):
        for key in ("train_cfg", "test_cfg"):
            for path, node in _dict_paths(holder.get(key)):
                sampler = node.get("sampler")
                if "rcnn" in path and isinstance(sampler, dict) and "num" in sampler:
                    sampler["num"] = min(sampler["num"], RCNN_ROIS)
                if path and path[-1] in ("rpn_proposal", "rpn"):
                    _at_most(node, ("nms_pre", "max_per_img", "nms_post", "max_num"), RPN_PROPOSALS)
                if key == "test_cfg" and path and path[-1] == "rcnn":
                    _at_most(node, ("max_per_img",), DETECTIONS)


def _at_most(node: dict, names: Sequence[str], limit: int) -> None:
    for name in names:
        if isinstance(node.get(name), int):
            node[name] = min(node[name], limit)


def _dict_paths(tree: Any, path: Tuple[str, ...] = ()) -> Iterator[Tuple[Tuple[str, ...], dict]]:
    """(key path, dict) of every dict in a config tree (list items keep their parent's key)."""
    if isinstance(tree, dict):
        yield path, tree
        for key, value in tree.items():
            yield from _dict_paths(value, path + (str(key),))
    elif isinstance(tree, (list, tuple)):
        for value in tree:
            yield from _dict_paths(value, path)


def build_model(cfg: Any, configs_root: Path, config_rois: bool = False) -> Any:
    from mmdet.models import build_detector

    if not config_rois:
        limit_rois(cfg)
    strip_pretrained(cfg.model, configs_root)
    cfg.load_from = None
    cfg.resume_from = None
    model = build_detector(cfg.model, train_cfg=cfg.get("train_cfg"), test_cfg=cfg.get("test_cfg"))
    model.init_weights()
    return model


def make_batches(needs: Needs, seed: int) -> Tuple[Any, Any]:
    """(train batch of 2 images, test batch of 1), collated by mmpar."""
    import numpy as np

    from mmpar import collate

    rng = np.random.default_rng(seed)
    shapes = needs.shapes()
    samples = [train_sample(needs, rng, i, *s) for i, s in enumerate(shapes)]
    train = collate(samples, samples_per_gpu=len(samples))
    test = collate([test_sample(needs, rng, *shapes[0])], samples_per_gpu=1)
    return train, test


def _wrap(model: Any) -> Any:
    from mmpar import MMDataParallel

    return MMDataParallel(model, device_ids=["cpu"])


def train_step(model: Any, data: Any) -> None:
    import torch

    model.train()
    outputs = _wrap(model).train_step(data, optimizer=None)
    loss = outputs["loss"]
    if not isinstance(loss, torch.Tensor) or not bool(torch.isfinite(loss).all()):
        raise StageError(f"the loss is not finite: {outputs.get('log_vars')}")
    loss.backward()
    if not any(p.grad is not None and bool(p.grad.any()) for p in model.parameters()):
        raise StageError("no parameter got a non-zero gradient")


def test_step(model: Any, data: Any) -> Any:
    import torch

    model.eval()
    with torch.no_grad():
        return _wrap(model)(return_loss=False, rescale=True, **data)


# --------------------------------------------------------------------------- the result's form


def check_result(output: Any, needs: Needs, data: Any) -> None:
    """Check the test output has mmdet's form: one entry per image (here one).

    An entry is per-class boxes (a list of ``(k, 5)`` arrays, one per class),
    ``(bbox, segm)`` with one list of ``ori_shape`` masks per class, a panoptic
    dict (``pan_results`` of ``ori_shape``, maybe ``ins_results``), or, for a
    region proposal network, one ``(k, 5)`` array.

    Raises:
        StageError: naming what differs.
    """
    if not isinstance(output, list) or len(output) != 1:
        raise StageError(f"expected a list of 1 result (one image), got {_form(output)}")
    ori = tuple(data["img_metas"][0].data[0][0]["ori_shape"][:2])
    entry = output[0]
    if isinstance(entry, dict):
        if "pan_results" not in entry:
            raise StageError(f"a dict result without 'pan_results': keys {sorted(entry)}")
        if tuple(entry["pan_results"].shape) != ori:
            raise StageError(f"pan_results of shape {entry['pan_results'].shape}, expected {ori}")
        if "ins_results" in entry:
            _check_instances(entry["ins_results"], needs, ori)
    elif isinstance(entry, tuple):
        _check_instances(entry, needs, ori)
    elif _is_boxes(entry):
        return  # a region proposal network's proposals
    else:
        _check_boxes(entry, needs.things)


def _form(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}"
    return type(value).__name__


def _is_boxes(value: Any) -> bool:
    return hasattr(value, "shape") and len(value.shape) == 2 and value.shape[1] == 5


def _check_boxes(bbox: Any, classes: int) -> None:
    if not isinstance(bbox, list) or len(bbox) != classes:
        raise StageError(f"expected per-class boxes, a list of {classes}, got {_form(bbox)}")
    bad = [i for i, b in enumerate(bbox) if not _is_boxes(b)]
    if bad:
        raise StageError(f"class {bad[0]}'s boxes are not a (k, 5) array: {_form(bbox[bad[0]])}")


def _check_instances(entry: Any, needs: Needs, ori: Tuple[int, int]) -> None:
    if len(entry) != 2:
        raise StageError(f"expected (bbox, segm), got {_form(entry)}")
    bbox, segm = entry
    if isinstance(segm, tuple):  # (masks, mask scores)
        segm = segm[0]
    _check_boxes(bbox, needs.things)
    if not isinstance(segm, list) or len(segm) != needs.things:
        raise StageError(f"expected per-class masks, a list of {needs.things}, got {_form(segm)}")
    for c, (boxes, masks) in enumerate(zip(bbox, segm)):
        if len(masks) != len(boxes):
            raise StageError(f"class {c}: {len(boxes)} boxes but {len(masks)} masks")
        shapes = {tuple(m.shape) for m in masks} - {ori}
        if shapes:
            raise StageError(f"class {c}: masks of shape {shapes.pop()}, expected {ori}")


# --------------------------------------------------------------------------- running many


def _child(
    conn: Any, path: str, rel: str, root: str, seed: int, threads: int, config_rois: bool
) -> None:
    """A child process's body: quiet, seeded, one config, the result sent back."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    warnings.simplefilter("ignore")
    import torch

    if threads:
        torch.set_num_threads(threads)
    try:
        result = run_config(Path(path), rel, Path(root), seed, config_rois)
    except BaseException as exc:  # noqa: BLE001 - the parent must hear of anything
        result = dict(config=rel, dir=rel.split("/")[0], times={}, status="FAIL", stage="tool")
        result["error"] = f"{type(exc).__name__}: {_one_line(exc)}"
    conn.send(result)
    conn.close()


def _context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def run_all(
    configs: List[str], root: Path, args: argparse.Namespace, report: Callable[[dict], None]
) -> List[dict]:
    """Run ``configs`` in up to ``args.jobs`` child processes; results in ``configs``' order."""
    ctx = _context()
    threads = 1 if args.jobs > 1 else 0
    pending = list(configs)
    running: Dict[Any, Tuple[str, Any, float]] = {}  # connection -> (config, process, deadline)
    results: Dict[str, dict] = {}
    while pending or running:
        while pending and len(running) < args.jobs:
            rel = pending.pop(0)
            here, there = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=_child,
                args=(there, str(root / rel), rel, str(root), args.seed, threads, args.config_rois),
                daemon=True,
            )
            proc.start()
            there.close()
            running[here] = (rel, proc, time.monotonic() + args.timeout)
        now = time.monotonic()
        wait = max(0.0, min(deadline for _, _, deadline in running.values()) - now)
        ready = multiprocessing.connection.wait(list(running), timeout=wait)
        for conn in list(running):
            rel, proc, deadline = running[conn]
            result = None
            if conn in ready:
                try:
                    result = conn.recv()
                except EOFError:  # died without a word: a crash
                    proc.join()
                    result = _failed(rel, "crash", f"the process ended with status {proc.exitcode}")
            elif time.monotonic() >= deadline:
                proc.kill()
                result = _failed(rel, "timeout", f"ran past --timeout {args.timeout:g} s")
            if result is not None:
                proc.join()
                conn.close()
                del running[conn]
                results[rel] = result
                report(result)
    return [results[rel] for rel in configs]


def _failed(rel: str, stage: str, error: str) -> dict:
    return dict(
        config=rel, dir=rel.split("/")[0], times={}, status="FAIL", stage=stage, error=error
    )


# --------------------------------------------------------------------------- reporting


def line(result: dict) -> str:
    """The one line of a config: PASS with timings, FAIL with the stage and error, SKIP why."""
    status, rel = result["status"], result["config"]
    if status == "PASS":
        times = " ".join(f"{k} {v:.1f}s" for k, v in result["times"].items())
        return f"PASS  {rel}  {times}"
    if status == "SKIP":
        return f"SKIP  {rel}  {result['reason']}"
    return f"FAIL  {rel}  {result['stage']}: {result['error']}"


def summary(results: List[dict]) -> Dict[str, Any]:
    counts = {s: sum(r["status"] == s for r in results) for s in ("PASS", "FAIL", "SKIP")}
    counted = counts["PASS"] + counts["FAIL"]
    return dict(
        configs=len(results),
        passed=counts["PASS"],
        failed=counts["FAIL"],
        skipped=counts["SKIP"],
        counted=counted,
        pass_rate=counts["PASS"] / counted if counted else None,
    )


def summary_text(results: List[dict]) -> str:
    s = summary(results)
    rate = "n/a" if s["pass_rate"] is None else f"{100 * s['pass_rate']:.1f}%"
    lines = [
        f"summary: {s['passed']} passed, {s['failed']} failed, {s['skipped']} skipped of "
        f"{s['configs']} configs; pass rate {rate} ({s['passed']}/{s['counted']} counted)"
    ]
    skipped = [r for r in results if r["status"] == "SKIP"]
    if skipped:
        lines.append("skipped (not counted):")
        lines += [f"  {r['config']}  {r['reason']}" for r in skipped]
    failed = [r for r in results if r["status"] == "FAIL"]
    if failed:
        lines.append("failed:")
        lines += [f"  {r['config']}  {r['stage']}: {r['error']}" for r in failed]
    return "\n".join(lines)


def by_dir_table(results: List[dict]) -> str:
    """A markdown table: model directory, passed/counted, failures with their reasons."""
    groups: Dict[str, List[dict]] = OrderedDict()
    for r in sorted(results, key=lambda r: r["config"]):
        groups.setdefault(r["dir"], []).append(r)
    rows = ["| directory | passed/total | failures |", "|---|---|---|"]
    for directory, rs in groups.items():
        passed = sum(r["status"] == "PASS" for r in rs)
        counted = sum(r["status"] != "SKIP" for r in rs)
        reasons: Dict[str, List[str]] = OrderedDict()  # one note per distinct reason
        for r in rs:
            if r["status"] == "FAIL":
                reasons.setdefault(f"{r['stage']}: {r['error']}", []).append(r["config"])
        notes = [
            f"{_names(configs, counted)}: {reason}".replace("|", "\\|")
            for reason, configs in reasons.items()
        ]
        skipped = [r for r in rs if r["status"] == "SKIP"]
        if skipped:
            reasons = sorted({r["reason"] for r in skipped})
            notes.append(f"{len(skipped)} skipped ({'; '.join(reasons)})")
        rows.append(f"| {directory} | {passed}/{counted} | {'<br>'.join(notes)} |")
    return "\n".join(rows)


def _names(configs: List[str], counted: int) -> str:
    if len(configs) == counted > 1:
        return f"all {counted}"
    return ", ".join(f"`{Path(c).name}`" for c in configs)


def write_json(path: str, results: List[dict], root: Path, ops: str) -> None:
    payload = dict(configs_root=str(root), ops=ops, summary=summary(results), results=results)
    Path(path).write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")


def read_json(path: str) -> List[dict]:
    try:
        payload = json.loads(Path(path).read_text(encoding="utf-8"))
        results = payload["results"]
        for r in results:
            r["config"], r["status"]  # noqa: B018 - the keys every report reads
    except (OSError, ValueError, KeyError, TypeError) as err:
        fail(
            f"--from-json: {path} is not a results file of this tool ({type(err).__name__}: {err})"
        )
    return results


# --------------------------------------------------------------------------- main


def _prepare_mmdet(ops: str) -> None:
    """Mount the ops, then import mmdet's models here, once, for every forked child."""
    # Import-time notices (mmcv's 2.0 announcement, torch's missing CUDA runtime) say
    # nothing about the zoo; mmpar's line on whose ops are in use stays.
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from mmpar.compat import patch_mmcv

        patch_mmcv(ops=ops)
        for name in ("mmdet.models", "mmdet.core", "mmdet.utils"):
            importlib.import_module(name)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args.from_json:
        results = read_json(args.from_json)
    else:
        root = Path(args.configs_root) if args.configs_root else default_configs_root()
        configs = select_configs(args, root)
        if args.json and not Path(args.json).resolve().parent.is_dir():
            fail(f"--json: the folder of {args.json} does not exist")
        if importlib.util.find_spec("mmdet") is None:
            fail("mmdet is not installed; install mmdet 2.x (pip install 'mmdet<3')")
        try:
            _prepare_mmdet(args.ops)
        except (ImportError, ValueError) as err:
            if args.debug:
                raise
            fail(f"mmdet's models do not import with --ops {args.ops}: {type(err).__name__}: {err}")
        count = f"{len(configs)} config{'' if len(configs) == 1 else 's'}"
        print(f"{count} under {root}, {args.jobs} at a time", flush=True)
        results = run_all(configs, root, args, lambda r: print(line(r), flush=True))
        if args.json:
            write_json(args.json, results, root, args.ops)
    print(summary_text(results), flush=True)
    if args.by_dir:
        print(by_dir_table(results), flush=True)
    return 0 if summary(results)["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
