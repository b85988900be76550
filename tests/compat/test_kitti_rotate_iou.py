"""mmpar.compat.kitti_rotate_iou: mmdet3d's KITTI rotated IoU without numba.cuda.

The reference is written from the kernel's definition: each box's corners as
mmdet3d's ``rbbox_to_corners`` places them, clipped against each other
(Sutherland-Hodgman, both convex) and measured with the shoelace formula. Where
mmdet3d 1.0.0rc6 is installed, the result is also compared with its own kernel
run by numba's CUDA simulator, in a child process.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from mmpar.compat.kitti_rotate_iou import ROTATE_IOU_MODULE, rotate_iou_eval
from tests.compat._mmcv_env import MMCV_170_DIR, child_env, requires_torchvision

pytestmark = requires_torchvision  # box_iou_rotated runs on torchvision's build of torch

KERNEL_FILE = MMCV_170_DIR / Path(*ROTATE_IOU_MODULE.split(".")).with_suffix(".py")


def corners(box: np.ndarray) -> np.ndarray:
    """mmdet3d's ``rbbox_to_corners``: ``(x, y) + [[cos, sin], [-sin, cos]] (+-dx/2, +-dy/2)``."""
    x, y, dx, dy, angle = (float(v) for v in box)
    c, s = math.cos(angle), math.sin(angle)
    local = [(-dx / 2, -dy / 2), (-dx / 2, dy / 2), (dx / 2, dy / 2), (dx / 2, -dy / 2)]
    return np.array([(c * u + s * v + x, -s * u + c * v + y) for u, v in local])


def area(poly: np.ndarray) -> float:
    if len(poly) < 3:
        return 0.0
    x, y = poly[:, 0], poly[:, 1]
    return abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))) / 2


def clip(subject: np.ndarray, window: np.ndarray) -> np.ndarray:
    """``subject`` cut to the convex ``window`` (Sutherland-Hodgman)."""
    sign = 1.0 if _signed_area(window) > 0 else -1.0
    out = list(subject)
    for a, b in zip(window, np.roll(window, -1, axis=0)):
        if not out:
            break
        points, out = out, []

        def inside(p, a=a, b=b):
            return sign * ((b[0] - a[0]) * (p[1] - a[1]) - (b[1] - a[1]) * (p[0] - a[0])) >= 0

        for p, q in zip(points, points[1:] + points[:1]):
            if inside(q):
                if not inside(p):
                    out.append(_crossing(p, q, a, b))
                out.append(q)
            elif inside(p):
                out.append(_crossing(p, q, a, b))
    return np.array(out).reshape(-1, 2)


def _signed_area(poly: np.ndarray) -> float:
    x, y = poly[:, 0], poly[:, 1]
    return float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))) / 2


def _crossing(p, q, a, b):
    d1, d2 = q - p, b - a
    t = ((a[0] - p[0]) * d2[1] - (a[1] - p[1]) * d2[0]) / (d1[0] * d2[1] - d1[1] * d2[0])
    return p + t * d1


def reference(boxes: np.ndarray, query: np.ndarray, criterion: int) -> np.ndarray:
    out = np.zeros((len(boxes), len(query)))
    for n, box in enumerate(boxes):
        for k, q in enumerate(query):
            inter = area(clip(corners(box), corners(q)))
            a_box, a_query = box[2] * box[3], q[2] * q[3]
            out[n, k] = {
                -1: lambda: inter / (a_box + a_query - inter),
                0: lambda: inter / a_query,
                1: lambda: inter / a_box,
            }.get(criterion, lambda: inter)()
    return out


def random_boxes(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.concatenate(
        [rng.uniform(0, 4, (n, 2)), rng.uniform(0.5, 3, (n, 2)), rng.uniform(-3.2, 3.2, (n, 1))],
        axis=1,
    ).astype(np.float32)


@pytest.mark.parametrize("criterion", [-1, 0, 1, 2])
def test_matches_the_definition(criterion: int) -> None:
    rng = np.random.default_rng(criterion + 5)
    boxes, query = random_boxes(rng, 9), random_boxes(rng, 7)
    # Identical, nested and edge-sharing pairs beside the random ones.
    boxes[0], query[0] = (1, 1, 2, 1, 0.3), (1, 1, 2, 1, 0.3)
    boxes[1], query[1] = (2, 2, 3, 3, 0.0), (2, 2, 1, 1, 0.7)
    boxes[2], query[2] = (0, 0, 2, 2, 0.0), (2, 0, 2, 2, 0.0)
    out = rotate_iou_eval(boxes, query, criterion)
    assert out.dtype == np.float32 and out.shape == (9, 7)
    np.testing.assert_allclose(out, reference(boxes, query, criterion), rtol=1e-5, atol=1e-6)
    assert np.count_nonzero(out) > 15


def test_the_angle_turns_clockwise_and_the_query_box_is_the_first() -> None:
    # A 4 x 1 bar turned by +0.5 rad in the kernel's sense (clockwise in x-right,
    # y-up axes) covers (1.5, -0.8) and misses (1.5, +0.8): the mirror image would not.
    bar = np.array([[0.0, 0.0, 4.0, 1.0, 0.5]], np.float32)
    probe_below = np.array([[1.5, -0.8, 0.2, 0.2, 0.0]], np.float32)
    probe_above = np.array([[1.5, 0.8, 0.2, 0.2, 0.0]], np.float32)
    assert rotate_iou_eval(bar, probe_below, 2)[0, 0] == pytest.approx(0.04, rel=1e-5)
    assert rotate_iou_eval(bar, probe_above, 2)[0, 0] == 0.0
    # Criterion 0 divides by the query box's area, 1 by the box's.
    assert rotate_iou_eval(bar, probe_below, 0)[0, 0] == pytest.approx(1.0, rel=1e-5)
    assert rotate_iou_eval(bar, probe_below, 1)[0, 0] == pytest.approx(0.01, rel=1e-5)


def test_empty_and_degenerate_boxes() -> None:
    boxes = np.array([[0.0, 0.0, 2.0, 1.0, 0.2]], np.float32)
    assert rotate_iou_eval(np.zeros((0, 5)), boxes).shape == (0, 1)
    empty = rotate_iou_eval(boxes, np.zeros((0, 5)))
    assert empty.shape == (1, 0) and empty.dtype == np.float32
    flat = np.array([[0.0, 0.0, 0.0, 1.0, 0.0]], np.float32)
    # No intersection with a zero-area box; a ratio over its area is 0 / 0, as in the kernel.
    assert rotate_iou_eval(boxes, flat, 2)[0, 0] == 0.0
    assert rotate_iou_eval(boxes, flat, -1)[0, 0] == 0.0
    assert np.isnan(rotate_iou_eval(boxes, flat, 0)[0, 0])
    assert np.isnan(rotate_iou_eval(flat, flat, -1)[0, 0])


@pytest.mark.parametrize(
    "boxes, query, name",
    [(np.zeros((3, 4)), np.zeros((2, 5)), "boxes"), (np.zeros((3, 5)), np.zeros(5), "query_boxes")],
)
def test_bad_shapes(boxes: np.ndarray, query: np.ndarray, name: str) -> None:
    with pytest.raises(ValueError, match=rf"^rotate_iou_eval: {name} must have shape \(n, 5\)"):
        rotate_iou_eval(boxes, query)


MEND_CHILD = textwrap.dedent(
    """
    import sys
    from mmpar.compat.kitti_rotate_iou import mend_kitti_rotate_iou, rotate_iou_eval
    mend_kitti_rotate_iou()
    mend_kitti_rotate_iou()
    finders = [f for f in sys.meta_path if type(f).__module__ == 'mmpar.compat.kitti_rotate_iou']
    assert len(finders) == 1, sys.meta_path
    # As mmdet3d's eval.py does, at each call:
    from mmdet3d.core.evaluation.kitti_utils.rotate_iou import rotate_iou_gpu_eval
    import numpy as np
    boxes = np.array([[0, 0, 2, 2, 0], [5, 5, 1, 1, 0]], np.float32)
    query = np.array([[1, 0, 2, 2, 0]], np.float32)
    out = rotate_iou_gpu_eval(boxes, query, criterion=-1, device_id=0)
    assert out.dtype == np.float32 and np.allclose(out, [[1 / 3], [0.0]], rtol=1e-6), out
    print('ok')
    """
)


def test_mend_answers_the_import_of_mmdet3ds_module(tmp_path: Path) -> None:
    # A stand-in for mmdet3d's package whose rotate_iou fails on import, as mmdet3d's
    # does without a CUDA driver (it compiles its kernel for the device on import).
    package = tmp_path / "mmdet3d" / "core" / "evaluation" / "kitti_utils"
    package.mkdir(parents=True)
    for folder in [package, *package.parents][:4]:
        (folder / "__init__.py").write_text("")
    (package / "rotate_iou.py").write_text(
        "raise RuntimeError('CUDA driver library cannot be found')\n"
    )
    env = child_env(NUMBA_DISABLE_CUDA="1")
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    proc = subprocess.run(
        [sys.executable, "-c", MEND_CHILD], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "ok"


KERNEL_CHILD = textwrap.dedent(
    """
    import importlib.util, sys
    import numpy as np
    spec = importlib.util.spec_from_file_location('rotate_iou_kernel', sys.argv[1])
    kernel = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernel)
    from mmpar.compat.kitti_rotate_iou import rotate_iou_eval
    rng = np.random.default_rng(3)
    def boxes(n):
        return np.concatenate([rng.uniform(0, 4, (n, 2)), rng.uniform(0.5, 3, (n, 2)),
                               rng.uniform(-3.2, 3.2, (n, 1))], axis=1).astype(np.float32)
    b, q = boxes(9), boxes(6)
    for criterion in (-1, 0, 1, 2):
        ours = rotate_iou_eval(b, q, criterion)
        theirs = kernel.rotate_iou_gpu_eval(b, q, criterion)
        assert np.count_nonzero(theirs) > 10, theirs
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=2e-6)
    print('ok')
    """
)


@pytest.mark.skipif(not KERNEL_FILE.is_file(), reason=f"mmdet3d's {KERNEL_FILE} is not installed")
def test_agrees_with_mmdet3ds_kernel_on_numbas_cuda_simulator() -> None:
    pytest.importorskip("numba")
    env = child_env(NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run(
        [sys.executable, "-c", KERNEL_CHILD, str(KERNEL_FILE)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "ok"
