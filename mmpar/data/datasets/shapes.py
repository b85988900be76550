"""Filled shapes drawn with numpy: the pictures of :class:`SyntheticShapes`."""

from __future__ import annotations

from typing import Callable, Dict, List, Tuple

import numpy as np

__all__ = ["SHAPES", "shape_mask", "render_shapes"]


def _grid(h: int, w: int) -> Tuple[np.ndarray, np.ndarray]:
    """Pixel centres mapped to [-1, 1]: ``(x (1, w), y (h, 1))``."""
    x = (np.arange(w) + 0.5) / w * 2 - 1
    y = (np.arange(h) + 0.5) / h * 2 - 1
    return x[None, :], y[:, None]


def _rectangle(h: int, w: int) -> np.ndarray:
    return np.ones((h, w), dtype=bool)


def _ellipse(h: int, w: int) -> np.ndarray:
    x, y = _grid(h, w)
    return x**2 + y**2 <= 1


def _triangle(h: int, w: int) -> np.ndarray:
    # Apex at the top centre, base along the bottom edge.
    x, y = _grid(h, w)
    return np.abs(x) <= (y + 1) / 2 + 0.5 / h


def _cross(h: int, w: int) -> np.ndarray:
    x, y = _grid(h, w)
    return (np.abs(x) <= 1 / 3) | (np.abs(y) <= 1 / 3)


def _ring(h: int, w: int) -> np.ndarray:
    x, y = _grid(h, w)
    r2 = x**2 + y**2
    return (r2 <= 1) & (r2 >= 0.36)


#: Drawable shapes in label order: name -> ``mask(h, w) -> (h, w) bool``.
SHAPES: Dict[str, Callable[[int, int], np.ndarray]] = {
    "rectangle": _rectangle,
    "ellipse": _ellipse,
    "triangle": _triangle,
    "cross": _cross,
    "ring": _ring,
}


def shape_mask(name: str, h: int, w: int) -> np.ndarray:
    """The ``(h, w)`` bool mask of shape ``name`` filling an ``h x w`` box."""
    return SHAPES[name](h, w)


Box = Tuple[int, int, int, int]


def _place(rng: np.random.Generator, h: int, w: int, taken: List[Box]) -> Box:
    """A random box ``(x0, y0, bw, bh)`` of 12-40% of the short image side, or ``()``
    when 20 draws all overlap a box of ``taken`` (boxes stay 1 pixel apart)."""
    for _ in range(20):
        side = rng.uniform(0.12, 0.4) * min(h, w)
        aspect = np.exp(rng.uniform(-0.35, 0.35))
        bw = int(min(w, max(6, round(side * aspect))))
        bh = int(min(h, max(6, round(side / aspect))))
        x0 = int(rng.integers(0, w - bw + 1))
        y0 = int(rng.integers(0, h - bh + 1))
        if all(
            x0 > tx + tw or tx > x0 + bw or y0 > ty + th or ty > y0 + bh for tx, ty, tw, th in taken
        ):
            return x0, y0, bw, bh
    return ()  # type: ignore[return-value]


def render_shapes(
    rng: np.random.Generator, h: int, w: int, classes: Tuple[str, ...], max_objects: int
) -> Dict[str, np.ndarray]:
    """Draw 1 to ``max_objects`` non-overlapping filled shapes on a noisy background.

    Each shape is one solid colour with a channel >= 190; the background is a dark
    colour (channels < 100) plus Gaussian noise. Boxes are the tight boxes of the
    drawn pixels (x1y1x2y2, ``x2`` one past the last column).

    Args:
        rng: Source of randomness; the picture is a function of its state.
        h, w: Image size.
        classes: Shape names (keys of :data:`SHAPES`); label ``k`` draws ``classes[k]``.
        max_objects: Number of shapes tried; some may not find free room.

    Returns:
        ``img`` uint8 ``(h, w, 3)``, ``bboxes`` float32 ``(K, 4)``, ``labels`` int64
        ``(K,)``, ``masks`` bool ``(K, h, w)`` and ``seg`` uint8 ``(h, w)`` (0 for
        the background, ``label + 1`` on each shape).
    """
    background = rng.integers(10, 100, size=3)
    img = np.clip(background + rng.normal(0.0, 10.0, size=(h, w, 3)), 0, 255).astype(np.uint8)
    seg = np.zeros((h, w), dtype=np.uint8)
    taken: List[Box] = []
    boxes, labels, masks = [], [], []
    for _ in range(int(rng.integers(1, max_objects + 1))):
        label = int(rng.integers(len(classes)))
        color = rng.integers(40, 256, size=3)
        color[rng.integers(3)] = rng.integers(190, 256)
        box = _place(rng, h, w, taken)
        if not box:
            continue
        taken.append(box)
        x0, y0, bw, bh = box
        local = shape_mask(classes[label], bh, bw)
        mask = np.zeros((h, w), dtype=bool)
        mask[y0 : y0 + bh, x0 : x0 + bw] = local
        img[mask] = color.astype(np.uint8)
        seg[mask] = label + 1
        rows, cols = np.flatnonzero(local.any(1)), np.flatnonzero(local.any(0))
        boxes.append([x0 + cols[0], y0 + rows[0], x0 + cols[-1] + 1, y0 + rows[-1] + 1])
        labels.append(label)
        masks.append(mask)
    return dict(
        img=img,
        bboxes=np.array(boxes, dtype=np.float32).reshape(-1, 4),
        labels=np.array(labels, dtype=np.int64),
        masks=np.array(masks, dtype=bool).reshape(-1, h, w),
        seg=seg,
    )
