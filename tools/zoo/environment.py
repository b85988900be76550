"""What the tool changes in its own processes, and only where asked: import paths, numpy.

``--pythonpath DIR`` puts folders first on the import path of the tool and of its
children: a codebase that refuses the installed mmcv (mmaction2 and mmpose 0.x ask
for mmcv <= 1.7.0) or needs packages the machine lacks runs on ones installed
there (``pip install --target DIR``).

``--numpy-aliases`` gives numpy back the aliases that numpy 1.24 and 2.0 removed
(``np.int``, ``np.bool8``, ...) and that the codebases of 2022 still use
(mmedit 0.16 at import, mmdet's ``IoUBalancedNegSampler``): without it, those
fail as they do on such a numpy.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Dict, Sequence

#: Alias -> what it stood for, from the numpy module (the aliases numpy removed).
NUMPY_ALIASES: Dict[str, Callable[[Any], Any]] = {
    "int": lambda np: int,
    "float": lambda np: float,
    "bool": lambda np: bool,
    "object": lambda np: object,
    "str": lambda np: str,
    "complex": lambda np: complex,
    "bool8": lambda np: np.bool_,
    "int0": lambda np: np.intp,
    "uint0": lambda np: np.uintp,
    "float_": lambda np: np.float64,
    "complex_": lambda np: np.complex128,
    "string_": lambda np: np.bytes_,
    "unicode_": lambda np: np.str_,
    "NaN": lambda np: np.nan,
    "Inf": lambda np: np.inf,
    "product": lambda np: np.prod,
    "cumproduct": lambda np: np.cumprod,
    "alltrue": lambda np: np.all,
    "sometrue": lambda np: np.any,
    "round_": lambda np: np.round,
}


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


def restore_numpy_aliases() -> None:
    """Give numpy back the aliases of :data:`NUMPY_ALIASES` it no longer has."""
    import warnings

    import numpy as np

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy's FutureWarning on looking up np.object
        missing = [name for name in NUMPY_ALIASES if not hasattr(np, name)]
    for name in missing:
        setattr(np, name, NUMPY_ALIASES[name](np))
