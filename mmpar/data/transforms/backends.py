"""Which image library a pipeline step uses: OpenCV where it is installed, else Pillow and torch.

OpenCV (``pip install opencv-python-headless``, or the ``opencv-python`` that mmcv
installs) decodes, resizes and flips an image several times faster than the
fallbacks on one CPU thread (``docs/benchmarks.md``, "Worker pipeline"). It is
optional: every step works without it. The steps whose result may depend on the
library take ``backend=``:

* ``LoadImageFromFile(backend=...)``: ``"cv2"`` or ``"pillow"``. Both decode
  JPEG with libjpeg-turbo and give the same pixels for colour images on the PyPI
  wheels; grayscale images are always converted by Pillow (OpenCV's grayscale
  decode takes the JPEG's luma as it is stored, Pillow converts from RGB);
* ``Resize(backend=...)``: ``"cv2"`` or ``"torch"``. Both are bilinear with
  half-pixel centres and no antialiasing, each within one grey level of the
  exact value for uint8 images (``tests/test_image_backends.py``).

``"auto"`` (the default) picks OpenCV when it can be imported.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Optional, Tuple

__all__ = ["opencv", "resolve_backend"]


@functools.lru_cache(maxsize=None)
def opencv() -> Optional[ModuleType]:
    """The ``cv2`` module, or None when OpenCV is not installed."""
    try:
        import cv2
    except ImportError:
        return None
    return cv2


def resolve_backend(backend: str, fallback: str, owner: str) -> str:
    """The library ``backend`` names: ``"cv2"`` or ``fallback``; ``"auto"`` is OpenCV if present.

    Args:
        backend: ``"auto"``, ``"cv2"`` or ``fallback``.
        fallback: The library used without OpenCV (``"pillow"``, ``"torch"``).
        owner: The step, for messages.

    Raises:
        ValueError: Another name.
        ImportError: ``"cv2"`` asked for and OpenCV is not installed; the message
            says how to install it.
    """
    choices: Tuple[str, ...] = ("auto", "cv2", fallback)
    if backend not in choices:
        raise ValueError(f"{owner}: backend must be one of {choices}, got {backend!r}")
    if backend == "auto":
        return "cv2" if opencv() is not None else fallback
    if backend == "cv2" and opencv() is None:
        raise ImportError(
            f"{owner}: backend='cv2' needs OpenCV, which is not installed: "
            "pip install opencv-python-headless (or backend='auto')"
        )
    return backend
