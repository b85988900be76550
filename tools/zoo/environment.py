"""The import path of the tool and its children: ``--pythonpath``.

``--pythonpath DIR`` puts folders first on the import path of the tool and of its
children: a codebase that refuses the installed mmcv (mmaction2 and mmpose 0.x ask
for mmcv <= 1.7.0) runs on one installed there (``python -m mmpar.compat.install
--mmcv 1.7.0 --target DIR mmpose mmaction2``), and packages missing from the
environment can be installed there too (``pip install --target DIR``).
"""

from __future__ import annotations

import os
import sys
from typing import Sequence


def add_pythonpath(folders: Sequence[str]) -> None:
    """Put ``folders`` first on this process's import path and on its children's.

    Children forked from this process inherit ``sys.path``; ``$PYTHONPATH`` serves
    spawned ones (and any process they start).
    """
    if not folders:
        return
    sys.path[:0] = [f for f in folders if f not in sys.path]
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(list(folders) + rest)
