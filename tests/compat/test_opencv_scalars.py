"""mmpar.compat.opencv_scalars: OpenCV 5 given numpy numbers as colours and fill values.

The mending is checked in a child process each, so the test process keeps cv2 as it is.
"""

from __future__ import annotations

import pytest

from tests.compat._mmcv_env import requires_mmcv
from tests.compat._mmcv_env import run_python as run

np = pytest.importorskip("numpy")
cv2 = pytest.importorskip("cv2")

from mmpar.compat.opencv_scalars import python_numbers  # noqa: E402


def _refuses_numpy_numbers() -> bool:
    try:
        cv2.line(np.zeros((2, 2), np.uint8), (0, 0), (1, 1), np.float32(1))
    except cv2.error:
        return True
    return False


needs_opencv5 = pytest.mark.skipif(
    not _refuses_numpy_numbers(), reason="this OpenCV reads numpy numbers itself"
)


def test_numpy_numbers_become_python_numbers_and_arrays_stay() -> None:
    assert type(python_numbers(np.float32(0.5))) is float
    assert type(python_numbers(np.int64(3))) is int
    assert python_numbers(np.array(2.5)) == 2.5 and type(python_numbers(np.array(2.5))) is float
    colour = python_numbers((np.uint8(1), 2, np.float32(0.5)))
    assert colour == (1, 2, 0.5) and [type(c) for c in colour] == [int, int, float]
    image = np.zeros((2, 2))
    points = [np.zeros((3, 2), np.int32)]
    assert python_numbers(image) is image
    assert python_numbers(points) is points
    assert python_numbers((1, 2)) == (1, 2) and python_numbers("a") == "a"
    assert python_numbers([]) == []


@needs_opencv5
def test_drawing_and_border_functions_take_numpy_numbers_once_mended() -> None:
    out = run(
        "import cv2, numpy as np\n"
        "from mmpar.compat.opencv_scalars import mend_opencv_scalars\n"
        "m = np.zeros((8, 8), np.float32)\n"
        "tri = [np.array([[1, 1], [6, 1], [6, 6]], np.int32)]\n"
        "try:\n"
        "    cv2.fillPoly(m, tri, color=np.float32(0.25))\n"
        "    raise SystemExit('OpenCV took a numpy colour before the mend')\n"
        "except cv2.error as err:\n"
        "    assert 'color' in str(err)\n"
        "mended = mend_opencv_scalars()\n"
        "assert {'fillPoly', 'line', 'drawContours', 'copyMakeBorder'} <= set(mended)\n"
        "assert 'warpAffine' in mended\n"
        "assert mend_opencv_scalars() == []\n"
        "cv2.fillPoly(m, tri, color=np.float32(0.25))\n"
        "assert m[5, 5] == 0.25 and m[0, 0] == 0, m\n"
        "cv2.line(m, (0, 7), (7, 7), np.array(0.5))\n"
        "assert (m[7] == 0.5).all()\n"
        "cv2.drawContours(m, tri, -1, (np.int64(1),), -1)\n"
        "assert m[5, 5] == 1\n"
        "b = cv2.copyMakeBorder(m, 1, 1, 1, 1, cv2.BORDER_CONSTANT, value=np.float32(3))\n"
        "assert b.shape == (10, 10) and b[0, 0] == 3\n"
        "w = cv2.warpAffine(m, np.array([[1, 0, 20], [0, 1, 0]], np.float64), (8, 8),\n"
        "                   borderValue=(np.int64(9),))\n"
        "assert (w == 9).all()\n"
        "print('ok')\n"
    )
    assert out.strip() == "ok"


@needs_opencv5
@requires_mmcv
def test_mmocr_drrg_targets_draw_their_maps_after_patch_mmcv() -> None:
    """mmocr 0.6.3's DRRG targets draw sin/cos maps with ``np.float32`` colours."""
    pytest.importorskip("mmocr")
    out = run(
        "from mmpar.compat import patch_mmcv\n"
        "patch_mmcv()\n"
        "import numpy as np\n"
        "from mmocr.datasets.pipelines.textdet_targets import DRRGTargets\n"
        "top = np.array([[10, 10], [30, 12], [50, 14]], np.float32)\n"
        "bot = top + np.float32(10)\n"
        "centre = (top + bot) / 2\n"
        "maps = [np.zeros((40, 64), np.float32) for _ in range(5)]\n"
        "DRRGTargets().draw_center_region_maps(top, bot, centre, *maps, 0.3)\n"
        "mask, top_h, bot_h, sin_map, cos_map = maps\n"
        "inside = mask > 0\n"
        "assert inside.sum() > 0\n"
        "assert np.allclose(sin_map[inside] ** 2 + cos_map[inside] ** 2, 1, atol=1e-5)\n"
        "print('ok')\n"
    )
    assert out.strip().endswith("ok")
