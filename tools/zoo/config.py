"""A config loaded and made safe to run: no pretrained weights, fewer RoIs; what it needs.

Config trees are walked here (:func:`dicts`) for the other modules too.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections import deque
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence, Tuple

#: RoIs an R-CNN head samples per training image, at most (the configs say 128 to 512; the
#: images are small). ``--config-rois`` keeps the configs' numbers.
RCNN_ROIS = 32
#: Proposals an RPN keeps per image, at most (the configs say 300 to 2000).
RPN_PROPOSALS = 200
#: Detections an R-CNN head keeps per test image, at most (LVIS configs say 300).
DETECTIONS = 100


def load_config(path: Path) -> Any:
    """The config, custom imports not yet made.

    Args:
        path: The config file.

    Returns:
        An ``mmcv.Config``.
    """
    from mmcv import Config

    return Config.fromfile(str(path), import_custom_modules=False)


def needed_package(cfg: Any, optional: Sequence[str]) -> Optional[str]:
    """An optional package the config needs and this machine lacks (custom_imports, types).

    Args:
        cfg: The config.
        optional: The packages to look for.

    Returns:
        One of ``optional``, or None where nothing is missing.
    """
    names = custom_imports(cfg)
    for node in dicts(cfg.get("model")):
        if isinstance(node.get("type"), str) and "." in node["type"]:
            names.append(node["type"])
    for name in names:
        root = name.split(".")[0]
        if root in optional and importlib.util.find_spec(root) is None:
            return root
    return None


def custom_imports(cfg: Any) -> List[str]:
    """The modules the config's ``custom_imports`` names (a list, or one name as mmcv allows)."""
    names = (cfg.get("custom_imports") or {}).get("imports") or []
    return [names] if isinstance(names, str) else list(names)


def import_custom_modules(cfg: Any) -> None:
    """Import the modules the config's ``custom_imports`` names."""
    for name in custom_imports(cfg):
        importlib.import_module(name)


def dicts(tree: Any) -> Iterator[dict]:
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


def strip_pretrained(model_cfg: Any, configs_root: Path, keep: Sequence[str] = ()) -> None:
    """Drop every pretrained weight from a model config, in place.

    ``pretrained`` and ``*_pretrained`` values (mmedit's ``spynet_pretrained``),
    ``init_cfg`` entries of type ``Pretrained``, every backbone's ``init_cfg``, and
    teachers' checkpoints (a teacher's config is loaded, stripped the same way,
    and given inline).

    Args:
        model_cfg: The config's ``model``.
        configs_root: The folder of model directories, where teachers' configs are.
        keep: Types whose ``pretrained`` stays (mmedit's PerceptualLoss requires one).
    """
    for node in list(dicts(model_cfg)):
        for key in [k for k in node if k == "pretrained" or str(k).endswith("_pretrained")]:
            if node.get("type") not in keep:  # None, not dropped: mmaction2's ResNet3d needs it
                node[key] = None
        init = node.get("init_cfg")
        if _is_pretrained(init):
            node["init_cfg"] = None
        elif isinstance(init, (list, tuple)):
            node["init_cfg"] = [i for i in init if not _is_pretrained(i)] or None
        if isinstance(node.get("backbone"), dict) and "init_cfg" in node["backbone"]:
            node["backbone"]["init_cfg"] = None  # LeNet5 and others take no init_cfg
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


def limit_rois(cfg: Any) -> None:
    """At most :data:`RCNN_ROIS` sampled RoIs and :data:`RPN_PROPOSALS` proposals per
    image, and :data:`DETECTIONS` per test image of an R-CNN head.

    Sizes only: the same code runs, on fewer boxes (the images are small).

    Args:
        cfg: The config, changed in place (its and its model's ``train_cfg`` and
            ``test_cfg``).
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
