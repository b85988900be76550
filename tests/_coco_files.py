"""Write COCO-format annotation files and real image files for tests.

``write_coco_files(root, data, images=None, seed=0) -> (ann_file, img_prefix)``
    Writes ``data`` (a COCO dict: ``images``, ``annotations``, ``categories``)
    as ``root/ann.json`` and, for every entry of ``images`` (default:
    ``data["images"]``), a random RGB image of that entry's ``height`` x
    ``width`` at ``root/images/<file_name>`` (sub-folders are created; the
    format follows the extension, e.g. ``.png`` or ``.jpg``, through Pillow).
    Pass ``images=()`` to write the annotations only. Returns the annotation
    file and the image folder (mmdet's ``img_prefix``, mmpar's ``img_prefix``),
    both as ``str``. Needs Pillow.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Mapping, Optional, Tuple

import numpy as np


def write_coco_files(
    root, data: Mapping, images: Optional[Iterable[Mapping]] = None, seed: int = 0
) -> Tuple[str, str]:
    from PIL import Image

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    ann_file = root / "ann.json"
    ann_file.write_text(json.dumps(data))
    folder = root / "images"
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(seed)
    for info in data["images"] if images is None else images:
        path = folder / info["file_name"]
        path.parent.mkdir(parents=True, exist_ok=True)
        arr = rng.integers(0, 256, (info["height"], info["width"], 3), dtype=np.uint8)
        Image.fromarray(arr).save(path)
    return str(ann_file), str(folder)
