"""Plane geometry of the synthetic road corridor: the centre line, its offsets and arcs.

A route is sampled as an (N, 3) array of global ``x, y, yaw``. The corridor's centre line
is that route extended straight at both ends and resampled every metre; every other line
of the map (lane centres, lane edges, dividers, kerbs) is an offset of it, ``d`` metres to
the left of the direction of travel (negative: to the right).
"""

from __future__ import annotations

import math

import numpy as np

STEP = 1.0  # metres between samples of the resampled centre line


def check_route(route: np.ndarray, index: int) -> np.ndarray:
    """``route`` as a float (N, 3) array; a ValueError/TypeError naming it otherwise."""
    if not isinstance(route, np.ndarray):
        raise TypeError(f"routes[{index}]: expected a numpy.ndarray, found {type(route).__name__}")
    if route.ndim != 2 or route.shape[1] != 3 or route.shape[0] < 2:
        raise ValueError(f"routes[{index}]: expected shape (N >= 2, 3), found {route.shape}")
    out = route.astype(np.float64)
    if not np.isfinite(out).all():
        raise ValueError(f"routes[{index}]: expected finite x, y, yaw, found NaN or inf")
    return out


def centre_line(route: np.ndarray, extension: float) -> tuple[np.ndarray, np.ndarray]:
    """The route extended by ``extension`` metres at both ends, resampled every STEP.

    Args:
        route: (N, 3) global ``x, y, yaw``; consecutive duplicate positions are dropped.
        extension: metres of straight road before the first and after the last pose.

    Returns:
        ``xy`` (M, 2) and ``yaw`` (M,) of the resampled line, yaw unwrapped.
    """
    keep = np.ones(len(route), dtype=bool)
    keep[1:] = np.linalg.norm(np.diff(route[:, :2], axis=0), axis=1) > 1e-6
    route = route[keep]
    yaw = np.unwrap(route[:, 2])
    head = np.array([math.cos(yaw[0]), math.sin(yaw[0])])
    tail = np.array([math.cos(yaw[-1]), math.sin(yaw[-1])])
    xy = np.concatenate(
        [route[:1, :2] - extension * head, route[:, :2], route[-1:, :2] + extension * tail]
    )
    yaw = np.concatenate([yaw[:1], yaw, yaw[-1:]])
    arc = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(xy, axis=0), axis=1))])
    samples = np.arange(0.0, arc[-1] + 1e-9, STEP)
    out_xy = np.stack([np.interp(samples, arc, xy[:, 0]), np.interp(samples, arc, xy[:, 1])], 1)
    return out_xy, np.interp(samples, arc, yaw)


def offset(xy: np.ndarray, yaw: np.ndarray, d: float) -> np.ndarray:
    """The (M, 2) points ``d`` metres left of the (M, 2) line ``xy`` heading ``yaw``."""
    normal = np.stack([-np.sin(yaw), np.cos(yaw)], axis=1)
    return xy + d * normal


def strip(xy: np.ndarray, yaw: np.ndarray, left: float, right: float) -> np.ndarray:
    """The closed ring (without repeat) between the offsets ``right`` < ``left``, (2M, 2)."""
    return np.concatenate([offset(xy, yaw, right), offset(xy, yaw, left)[::-1]])


def arcline_paths(poses: np.ndarray) -> list[dict]:
    """One nuScenes arcline path per pair of consecutive poses, a circular arc each.

    Each arc leaves the first pose along its heading and turns by the heading change to the
    next pose; its length follows from the chord (``s = c * (t/2) / sin(t/2)`` for a turn
    ``t``). A left arc is shape ``LSL`` with ``segment_length [s, 0, 0]``, a right one
    ``RSR``; a straight piece is ``LSL`` with ``[0, s, 0]``.

    Args:
        poses: (K >= 2, 3) ``x, y, yaw`` along the lane in its direction of travel.

    Returns:
        K - 1 dicts with ``start_pose``, ``end_pose``, ``shape``, ``radius``,
        ``segment_length``.
    """
    paths = []
    for start, end in zip(poses[:-1], poses[1:]):
        chord = float(np.linalg.norm(end[:2] - start[:2]))
        turn = (float(end[2] - start[2]) + math.pi) % (2 * math.pi) - math.pi
        if abs(turn) < 1e-6:
            shape, radius, lengths = "LSL", 999.999, [0.0, chord, 0.0]
        else:
            length = chord * (turn / 2) / math.sin(turn / 2)
            shape = "LSL" if turn > 0 else "RSR"
            radius, lengths = length / abs(turn), [length, 0.0, 0.0]
        paths.append(
            {
                "start_pose": [float(start[0]), float(start[1]), wrap(float(start[2]))],
                "end_pose": [float(end[0]), float(end[1]), wrap(float(end[2]))],
                "shape": shape,
                "radius": radius,
                "segment_length": lengths,
            }
        )
    return paths


def wrap(angle: float) -> float:
    """``angle`` in [-pi, pi)."""
    return (angle + math.pi) % (2 * math.pi) - math.pi
