"""The camera images and lidar sweeps that the tables name, drawn from the world.

Images are 1600x900 JPEGs: sky, ground, and every object in front of the camera as the
filled outline of its projected box, so that an image model sees the objects where the
boxes say. A lidar sweep is nuScenes' ``.pcd.bin`` layout, float32 ``x, y, z, intensity,
ring`` in the LIDAR_TOP frame: ground returns around the ego (10 cm below the boxes'
bottoms, so that none counts for a box) plus returns inside each object's box; the
per-box counts become the annotations' ``num_lidar_pts``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from nuscenes_synth import world

COLOURS = {
    kind[0]: tuple(int(c) for c in np.random.default_rng(i).integers(40, 230, 3))
    for i, kind in enumerate(world.OBJECT_KINDS)
}
GROUND_POINTS = 6000
POINTS_PER_BOX = 80


def global_to_sensor(points: np.ndarray, ego: world.Pose, sensor: world.Sensor) -> np.ndarray:
    """Map (N, 3) global points into ``sensor``'s frame with the ego at ``ego``."""
    to_global = ego.matrix() @ sensor.to_ego.matrix()
    inverse = np.linalg.inv(to_global)
    return points @ inverse[:3, :3].T + inverse[:3, 3]


def convex_hull(points: np.ndarray) -> list[tuple[float, float]]:
    """The convex hull of (N, 2) points, counter-clockwise (Andrew's monotone chain)."""
    pts = sorted(set(map(tuple, points.tolist())))
    if len(pts) < 3:
        return pts

    def cross(o, a, b):
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    lower: list = []
    upper: list = []
    for p in pts:
        while len(lower) >= 2 and cross(lower[-2], lower[-1], p) <= 0:
            lower.pop()
        lower.append(p)
    for p in reversed(pts):
        while len(upper) >= 2 and cross(upper[-2], upper[-1], p) <= 0:
            upper.pop()
        upper.append(p)
    return lower[:-1] + upper[:-1]


def render_camera(boxes: list[world.Box], ego: world.Pose, camera: world.Sensor) -> Image.Image:
    """The image ``camera`` takes of ``boxes`` with the ego at ``ego``."""
    width, height = world.IMAGE_SIZE
    rows = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None, None]
    sky, ground = np.array([150, 190, 230]), np.array([90, 90, 85])
    horizon = float(camera.intrinsic[1][2]) / height
    pixels = np.where(rows < horizon, sky * (0.7 + 0.3 * rows / horizon), ground)
    image = Image.fromarray(np.broadcast_to(pixels, (height, width, 3)).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    intrinsic = np.asarray(camera.intrinsic)
    drawn = []
    for box in boxes:
        corners = global_to_sensor(box.corners(), ego, camera)
        if corners[:, 2].min() < 0.5:
            continue  # partly behind the camera: not drawn
        uv = corners @ intrinsic.T
        uv = uv[:, :2] / uv[:, 2:3]
        drawn.append((float(corners[:, 2].mean()), box.category, uv))
    for _, category, uv in sorted(drawn, key=lambda item: -item[0]):
        draw.polygon(convex_hull(uv), fill=COLOURS[category], outline=(20, 20, 20))
    return image


def points_in_box(points: np.ndarray, box: world.Box) -> np.ndarray:
    """A boolean mask of the (N, 3) global points inside ``box``."""
    c, s = np.cos(box.yaw), np.sin(box.yaw)
    d = points - np.asarray(box.center)
    local_x = d[:, 0] * c + d[:, 1] * s
    local_y = -d[:, 0] * s + d[:, 1] * c
    w, length, h = box.size
    return (abs(local_x) <= length / 2) & (abs(local_y) <= w / 2) & (abs(d[:, 2]) <= h / 2)


def lidar_sweep(
    boxes: list[world.Box], ego: world.Pose, lidar: world.Sensor, rng: np.random.Generator
) -> tuple[np.ndarray, list[int]]:
    """One sweep: (N, 5) float32 points in the lidar frame and the count inside each box."""
    radius = np.sqrt(rng.uniform(2.0**2, 50.0**2, GROUND_POINTS))
    angle = rng.uniform(-np.pi, np.pi, GROUND_POINTS)
    ground_ego = np.stack(
        [radius * np.cos(angle), radius * np.sin(angle), np.full_like(angle, -0.1)], 1
    )
    ground = ground_ego @ ego.matrix()[:3, :3].T + np.asarray(ego.translation)
    on_objects = []
    for box in boxes:
        unit = rng.uniform(-0.5, 0.5, (POINTS_PER_BOX, 3)) * np.asarray(box.size)[[1, 0, 2]]
        c, s = np.cos(box.yaw), np.sin(box.yaw)
        rot = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
        on_objects.append(unit @ rot.T + np.asarray(box.center))
    points = np.concatenate([ground, *on_objects]) if on_objects else ground
    counts = [int(points_in_box(points, box).sum()) for box in boxes]
    local = global_to_sensor(points, ego, lidar)
    intensity = rng.uniform(0, 255, (len(points), 1))
    ring = rng.integers(0, 32, (len(points), 1))
    return np.concatenate([local, intensity, ring], 1).astype(np.float32), counts


def write_image(path: Path, image: Image.Image) -> None:
    """Save ``image`` as a JPEG at ``path``, creating its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, quality=85)


def write_points(path: Path, points: np.ndarray) -> None:
    """Save (N, 5) float32 points in nuScenes' ``.pcd.bin`` layout at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    points.astype(np.float32).tofile(path)
