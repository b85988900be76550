"""mmcv's quadrilateral overlap in plain Python, one pair at a time (tests only).

Written from mmcv 1.7.2's definition (``single_box_iou_quadri``), in Python floats:

``quadri_overlap(a, b, mode="iou") -> float``
    IoU (or IoF: over ``a``'s area) of two ``[x1, y1, ..., x4, y4]`` quadrilaterals.
    The pair is centred on the mean of its 8 vertices. Areas: the two triangles of
    the fan from the first vertex, each taken positive; either below 1e-14 gives 0.
    Intersection: the area of the convex hull (Andrew's monotone chain) of the points
    collected (0 with fewer than 3): the crossings of every edge of one with every
    edge of the other (skipped where ``|det| <= 1e-14``, kept where both parameters
    are in ``[0, 1]``), and the vertices of each that lie in the other's region
    ``0 <= AP.AB <= AB.AB``, ``0 <= AP.AD <= AD.AD`` (``A``, ``B``, ``D``: its
    vertices 1, 2 and 4).

``quads(flat) -> list``
    ``[x1, y1, ..., x4, y4]`` as four ``(x, y)`` points.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

Point = Tuple[float, float]


def quads(flat: Sequence[float]) -> List[Point]:
    return [(float(flat[2 * i]), float(flat[2 * i + 1])) for i in range(4)]


def _cross(a: Point, b: Point) -> float:
    return a[0] * b[1] - b[0] * a[1]


def _sub(a: Point, b: Point) -> Point:
    return (a[0] - b[0], a[1] - b[1])


def _dot(a: Point, b: Point) -> float:
    return a[0] * b[0] + a[1] * b[1]


def _area(q: Sequence[Point]) -> float:
    fan = [_sub(v, q[0]) for v in q[1:]]
    return (abs(_cross(fan[0], fan[1])) + abs(_cross(fan[1], fan[2]))) / 2


def _in_region(p: Point, q: Sequence[Point]) -> bool:
    ab, ad, ap = _sub(q[1], q[0]), _sub(q[3], q[0]), _sub(p, q[0])
    return 0 <= _dot(ap, ab) <= _dot(ab, ab) and 0 <= _dot(ap, ad) <= _dot(ad, ad)


def _collected(p: Sequence[Point], q: Sequence[Point]) -> List[Point]:
    points = []
    for i in range(4):
        ep = _sub(p[(i + 1) % 4], p[i])
        for j in range(4):
            eq = _sub(q[(j + 1) % 4], q[j])
            det = _cross(eq, ep)
            if abs(det) <= 1e-14:
                continue
            apart = _sub(q[j], p[i])
            t_p, t_q = _cross(eq, apart) / det, _cross(ep, apart) / det
            if 0 <= t_p <= 1 and 0 <= t_q <= 1:
                points.append((p[i][0] + ep[0] * t_p, p[i][1] + ep[1] * t_p))
    points += [v for v in p if _in_region(v, q)]
    points += [v for v in q if _in_region(v, p)]
    return points


def _hull_area(points: Sequence[Point]) -> float:
    pts = sorted(set(points))
    if len(pts) < 3:
        return 0.0

    def turn(o: Point, a: Point, b: Point) -> float:
        return _cross(_sub(a, o), _sub(b, o))

    chains = []
    for seq in (pts, pts[::-1]):
        chain: List[Point] = []
        for v in seq:
            while len(chain) >= 2 and turn(chain[-2], chain[-1], v) <= 0:
                chain.pop()
            chain.append(v)
        chains.append(chain[:-1])
    hull = chains[0] + chains[1]
    return abs(sum(_cross(hull[i], hull[(i + 1) % len(hull)]) for i in range(len(hull)))) / 2


def quadri_overlap(a: Sequence[float], b: Sequence[float], mode: str = "iou") -> float:
    p, q = quads(a), quads(b)
    shift = (sum(v[0] for v in p + q) / 8, sum(v[1] for v in p + q) / 8)
    p, q = [_sub(v, shift) for v in p], [_sub(v, shift) for v in q]
    area_p, area_q = _area(p), _area(q)
    if area_p < 1e-14 or area_q < 1e-14:
        return 0.0
    points = _collected(p, q)
    inter = _hull_area(points) if len(points) > 2 else 0.0
    return inter / (area_p + area_q - inter if mode == "iou" else area_p)
