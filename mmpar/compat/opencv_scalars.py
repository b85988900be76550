"""OpenCV 5's scalar arguments, given numpy numbers as OpenCV 4 took them.

OpenCV 5 no longer reads a numpy number (``np.float32(0.5)``, ``np.int64(1)``,
``np.array(0.5)``; ``np.float64`` is a Python float and still passes) or a tuple of
them as a ``Scalar``: the ``color`` of ``fillPoly``, ``line`` or ``drawContours``,
the ``value`` of ``copyMakeBorder``, the ``borderValue`` of ``warpAffine``. It
raises ``cv2.error: Scalar value for argument 'color' is not numeric``. The codebases
of the mmcv 1.x era pass them: mmocr 0.6.3's DRRG and TextSnake targets draw their
maps with ``color=np.float32(...)``, so their training pipelines stop at the first
image.

:func:`mend_opencv_scalars` wraps the OpenCV functions that take a ``Scalar`` so that
each numpy number among their arguments (alone, or in a tuple or list of numbers) is
passed as the Python number it holds, which every OpenCV version reads alike.
Arrays (images, points) pass unchanged. Nothing is wrapped where OpenCV still reads
numpy numbers (OpenCV 4), or where OpenCV is not installed.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, List

__all__ = ["SCALAR_FUNCTIONS", "mend_opencv_scalars", "python_numbers"]

#: OpenCV's functions with a ``Scalar`` argument (a colour, a fill or border value)
#: that image pipelines call.
SCALAR_FUNCTIONS = (
    "arrowedLine",
    "circle",
    "copyMakeBorder",
    "drawContours",
    "drawMarker",
    "ellipse",
    "fillConvexPoly",
    "fillPoly",
    "floodFill",
    "line",
    "polylines",
    "putText",
    "rectangle",
    "remap",
    "warpAffine",
    "warpPerspective",
)

_MARK = "__mmpar_scalars__"


def python_numbers(value: Any) -> Any:
    """``value`` with numpy numbers as Python numbers.

    A numpy scalar or a 0-d array becomes its ``.item()``; a tuple or list whose
    items are all numbers becomes a tuple of Python numbers. Anything else (arrays
    of one or more dimensions, strings, points given as lists of arrays) is returned
    as it is.
    """
    import numpy as np

    if isinstance(value, np.generic) or (isinstance(value, np.ndarray) and value.ndim == 0):
        return value.item()
    if isinstance(value, (tuple, list)) and value:
        if all(isinstance(v, (int, float, np.number)) for v in value):
            if any(isinstance(v, np.number) for v in value):
                return tuple(v.item() if isinstance(v, np.number) else v for v in value)
    return value


def _reads_numpy_scalars(cv2: Any) -> bool:
    import numpy as np

    try:
        cv2.line(np.zeros((2, 2), np.uint8), (0, 0), (1, 1), np.float32(1))
    except Exception:  # cv2.error, or whatever an OpenCV build raises instead
        return False
    return True


def _taking_python_numbers(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def mended(*args: Any, **kwargs: Any) -> Any:
        args = tuple(python_numbers(a) for a in args)
        kwargs = {k: python_numbers(v) for k, v in kwargs.items()}
        return function(*args, **kwargs)

    setattr(mended, _MARK, True)
    return mended


def mend_opencv_scalars() -> List[str]:
    """Wrap :data:`SCALAR_FUNCTIONS` of ``cv2`` where OpenCV refuses numpy numbers.

    Returns:
        The names wrapped now, in :data:`SCALAR_FUNCTIONS`' order; empty when OpenCV
        is not installed, reads numpy numbers itself, or was mended before.
    """
    try:
        import cv2
    except ImportError:
        return []
    if getattr(getattr(cv2, "line", None), _MARK, False) or _reads_numpy_scalars(cv2):
        return []
    mended = []
    for name in SCALAR_FUNCTIONS:
        function = getattr(cv2, name, None)
        if function is not None:
            setattr(cv2, name, _taking_python_numbers(function))
            mended.append(name)
    return mended
