"""mmpar's ops under mmcv 1.x's names: the stand-in for ``mmcv.ops``.

Built on ``torchvision.ops`` and plain torch; mmpar compiles nothing. One module
per module of mmcv's ``mmcv/ops`` that it replaces, with mmcv's names,
signatures and defaults. :mod:`mmpar.compat.mmcv_ops` mounts them as
``mmcv.ops`` where mmcv's compiled ops do not load.
"""

from __future__ import annotations

from types import ModuleType
from typing import Dict, List

#: mmcv's module name (``nms`` for ``mmcv.ops.nms``) -> mmpar's module.
MODULES: Dict[str, ModuleType] = {}

__all__: List[str] = []
