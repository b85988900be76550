"""numpy's removed names, put back for the codebases of the mmcv 1.x era.

numpy 1.24 removed the aliases of Python's builtins (``np.int``, ``np.float``,
``np.bool``, ``np.object``, ``np.str``) and numpy 2.0 removed many more
(``np.bool8``, ``np.float_``, ``np.sctypes``, ``np.product``, ...). mmcv 1.x's
codebases and their dependencies were written before: mmedit 0.16.1 reads
``np.bool8`` when ``mmedit.models`` is imported, imgaug (mmocr's datasets) reads
``np.sctypes``, mmdet 2.x's ``IoUBalancedNegSampler`` (Libra R-CNN) calls
``np.int``. On today's numpy each stops with an ``AttributeError``.

:func:`restore_numpy_aliases` sets each removed name that numpy lacks to what it
meant before its removal. A name numpy has is never touched (numpy 2 has its own
``np.long``, for instance), and numpy's behaviour for every other name is
unchanged.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Dict, List

__all__ = ["restore_numpy_aliases"]


def _asfarray(a: Any, dtype: Any = None) -> Any:
    import numpy as np

    dtype = np.float64 if dtype is None else np.dtype(dtype)
    if not np.issubdtype(dtype, np.inexact):
        dtype = np.float64
    return np.asarray(a, dtype=dtype)


def _removed(np: Any) -> Dict[str, Callable[[], Any]]:
    """Removed name -> what builds its old value (looked up lazily: some need numpy's types)."""
    return {
        # Removed in numpy 1.24: the builtins' aliases.
        "int": lambda: int,
        "float": lambda: float,
        "bool": lambda: bool,
        "object": lambda: object,
        "str": lambda: str,
        "complex": lambda: complex,
        # Removed in numpy 2.0.
        "bool8": lambda: np.bool_,
        "int0": lambda: np.intp,
        "uint0": lambda: np.uintp,
        "float_": lambda: np.float64,
        "complex_": lambda: np.complex128,
        "cfloat": lambda: np.complex128,
        "longfloat": lambda: np.longdouble,
        "singlecomplex": lambda: np.complex64,
        "longcomplex": lambda: np.clongdouble,
        "clongfloat": lambda: np.clongdouble,
        "string_": lambda: np.bytes_,
        "unicode_": lambda: np.str_,
        "NaN": lambda: np.nan,
        "NAN": lambda: np.nan,
        "Inf": lambda: np.inf,
        "Infinity": lambda: np.inf,
        "infty": lambda: np.inf,
        "PINF": lambda: np.inf,
        "NINF": lambda: -np.inf,
        "PZERO": lambda: 0.0,
        "NZERO": lambda: -0.0,
        "product": lambda: np.prod,
        "cumproduct": lambda: np.cumprod,
        "sometrue": lambda: np.any,
        "alltrue": lambda: np.all,
        "round_": lambda: np.round,
        "asfarray": lambda: _asfarray,
        "sctypes": lambda: _sctypes(np),
    }


def _sctypes(np: Any) -> Dict[str, List[Any]]:
    return {
        "int": [np.int8, np.int16, np.int32, np.int64],
        "uint": [np.uint8, np.uint16, np.uint32, np.uint64],
        "float": [np.float16, np.float32, np.float64, np.longdouble],
        "complex": [np.complex64, np.complex128, np.clongdouble],
        "others": [bool, object, bytes, str, np.void],
    }


def restore_numpy_aliases() -> List[str]:
    """Put back each of numpy's removed names that this numpy lacks.

    Returns:
        The names set, in a fixed order; empty when numpy is not installed or
        has them all (numpy < 1.24), or when they were restored before.
    """
    try:
        import numpy as np
    except ImportError:
        return []
    restored = []
    for name, value in _removed(np).items():
        if name in vars(np):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy < 2 serves some with a DeprecationWarning
            served = hasattr(np, name)
        if not served:
            setattr(np, name, value())
            restored.append(name)
    return restored
