"""Plain-Python convex geometry for the tests of the point-set ops (tests only).

Written from the definitions, one polygon at a time, in float64:

``hull(points) -> list``
    The convex hull's extreme vertices, counter-clockwise (x right, y up) from the
    lowest point (least y, then least x), by Andrew's monotone chain. One point for
    equal points, two for points on a line.

``area(polygon) -> float``
    The shoelace signed area: positive counter-clockwise.

``clip(subject, clipper) -> list``
    The intersection of two counter-clockwise convex polygons, by Sutherland-Hodgman.

``pairs(flat) -> list``
    ``[x1, y1, x2, y2, ...]`` as ``[(x1, y1), (x2, y2), ...]``.

``iou(points, quad) -> float``, ``giou(points, quad) -> float``
    IoU and GIoU of a point set's hull with a convex quadrilateral (either
    orientation), as mmcv's ``convex_iou`` / ``convex_giou`` define them.

``mmcv_signature(module, function) -> (names, defaults)``
    A function's parameters in mmcv 1.7.2's source (skips without mmcv).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, List, Sequence, Tuple

import pytest

Point = Tuple[float, float]


def _cross(o: Point, a: Point, b: Point) -> float:
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def hull(points: Sequence[Sequence[float]]) -> List[Point]:
    pts = sorted({(float(x), float(y)) for x, y in points}, key=lambda p: (p[1], p[0]))
    if len(pts) <= 2:
        return pts
    # Monotone chain over (y, x) order: the lower chain runs on the right side.
    right: List[Point] = []
    for p in pts:
        while len(right) >= 2 and _cross(right[-2], right[-1], p) <= 0:
            right.pop()
        right.append(p)
    left: List[Point] = []
    for p in reversed(pts):
        while len(left) >= 2 and _cross(left[-2], left[-1], p) <= 0:
            left.pop()
        left.append(p)
    return right[:-1] + left[:-1] if len(right) + len(left) > 4 else [pts[0], pts[-1]]


def area(polygon: Sequence[Point]) -> float:
    n = len(polygon)
    return (
        sum(
            polygon[i][0] * polygon[(i + 1) % n][1] - polygon[i][1] * polygon[(i + 1) % n][0]
            for i in range(n)
        )
        / 2
    )


def clip(subject: Sequence[Point], clipper: Sequence[Point]) -> List[Point]:
    out = list(subject)
    for i in range(len(clipper)):
        a, b = clipper[i], clipper[(i + 1) % len(clipper)]
        src, out = out, []
        for j in range(len(src)):
            p, q = src[j], src[(j + 1) % len(src)]
            sp, sq = _cross(a, b, p), _cross(a, b, q)
            if sp >= 0:
                out.append(p)
            if (sp >= 0) != (sq >= 0):
                t = sp / (sp - sq)
                out.append((p[0] + t * (q[0] - p[0]), p[1] + t * (q[1] - p[1])))
        if not out:
            return []
    return out


def _quad(flat: Sequence[float]) -> List[Point]:
    quad = [(float(flat[2 * i]), float(flat[2 * i + 1])) for i in range(4)]
    return quad if area(quad) >= 0 else quad[::-1]


def pairs(flat: Sequence[float]) -> List[Point]:
    return [(float(flat[2 * i]), float(flat[2 * i + 1])) for i in range(len(flat) // 2)]


def iou(points: Sequence[float], quad: Sequence[float]) -> float:
    h, q = hull(pairs(points)), _quad(quad)
    inter = abs(area(clip(h, q))) if len(h) >= 3 else 0.0
    union = area(h) + area(q) - inter if len(h) >= 3 else area(q)
    return inter / union


def giou(points: Sequence[float], quad: Sequence[float]) -> float:
    h, q = hull(pairs(points)), _quad(quad)
    inter = abs(area(clip(h, q))) if len(h) >= 3 else 0.0
    union = (area(h) if len(h) >= 3 else 0.0) + area(q) - inter
    enclosing = area(hull(pairs(points) + q))
    return inter / union - (enclosing - union) / enclosing


def mmcv_signature(module: str, function: str) -> Tuple[List[str], List[Any]]:
    mmcv = pytest.importorskip("mmcv")
    tree = ast.parse((Path(mmcv.__file__).parent / "ops" / f"{module}.py").read_text())
    (func,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function]
    return [a.arg for a in func.args.args], [ast.literal_eval(d) for d in func.args.defaults]
