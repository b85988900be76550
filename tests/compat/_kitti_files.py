"""Write a small KITTI-format 3D detection set of real files, for mmdet3d's own tools.

``write_kitti(root, train, val, test=(), seed=0) -> Path``
    KITTI's layout under ``root``, as ``tools/create_data.py kitti`` reads it:

    - ``training/velodyne/NNNNNN.bin``: float32 ``x, y, z, intensity`` rows in the
      LiDAR frame (x forward, y left, z up): a ground plane of
      :data:`GROUND_POINTS` points at ``z = GROUND_Z`` (intensity 0.1-0.3) in the
      camera's field of view, and :data:`CAR_POINTS` points on the sides and roof
      of each car (intensity 0.7-1.0);
    - ``training/calib/NNNNNN.txt``: ``P0``-``P3``, ``R0_rect``,
      ``Tr_velo_to_cam``, ``Tr_imu_to_velo`` in KITTI's text format
      (:data:`CALIB`: a 1242 x 375 camera of focal length 720 px looking along
      the LiDAR's x axis);
    - ``training/label_2/NNNNNN.txt``: one ``Car`` line per car in camera
      coordinates (bottom centre, ``h w l``, ``rotation_y``, the 2D box of its
      projected corners), with KITTI's two decimals; the points are drawn from
      the rounded values, so labels and clusters agree;
    - ``training/image_2/NNNNNN.png``: a plain grey 1242 x 375 PNG (read for its
      size only);
    - ``testing/{velodyne,calib,image_2}`` for the ``test`` frames;
    - ``ImageSets/{train,val,test}.txt``: the frame ids.

    ``train``, ``val`` and ``test`` are sequences of frames, a frame being a
    sequence of :class:`Car`; training frames are numbered first, then the
    validation frames (both under ``training/``); test frames from 0 under
    ``testing/``. Every frame gets its own random points (``seed``).

``Car(x, y, yaw)``
    A car of KITTI's mean size (:data:`CAR_SIZE`, ``l, w, h``) standing on the
    ground, its bottom centre at LiDAR ``(x, y)``, heading ``yaw`` (radians,
    counter-clockwise from the x axis, mmdet3d's LiDAR convention). Keep it
    inside the camera's view (``|y| + 2.5 < 0.8 x``) and within 40 m, so that
    it survives ``create_data``'s crop to the image and counts as an easy
    object (2D box taller than 40 px).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, List, NamedTuple, Sequence, Tuple

import numpy as np

__all__ = [
    "CALIB",
    "CAR_POINTS",
    "CAR_SIZE",
    "GROUND_POINTS",
    "GROUND_Z",
    "IMAGE_SIZE",
    "Car",
    "write_kitti",
]

#: (width, height) of the camera image, KITTI's.
IMAGE_SIZE = (1242, 375)
#: KITTI's mean car: length, width, height (m).
CAR_SIZE = (3.9, 1.6, 1.56)
#: The ground's height in the LiDAR frame (KITTI's sensor is 1.73 m up).
GROUND_Z = -1.73
GROUND_POINTS = 2500
CAR_POINTS = 350

_F, _CX, _CY = 720.0, 621.0, 187.5
_VELO_TO_CAM = np.array(
    [[0.0, -1.0, 0.0, 0.0], [0.0, 0.0, -1.0, -0.08], [1.0, 0.0, 0.0, -0.27]]
)  # camera x = -y, y = -z, z = x (KITTI's axes), offset as KITTI's rig
_IMU_TO_VELO = np.array([[1.0, 0.0, 0.0, -0.81], [0.0, 1.0, 0.0, 0.32], [0.0, 0.0, 1.0, -0.8]])


def _projection(baseline: float) -> np.ndarray:
    return np.array(
        [[_F, 0.0, _CX, -_F * baseline + 0.0], [0.0, _F, _CY, 0.0], [0.0, 0.0, 1.0, 0.0]]
    )


#: The calibration file's matrices, in its order (P2 is the left colour camera).
CALIB = {
    "P0": _projection(0.0),
    "P1": _projection(0.54),
    "P2": _projection(0.0),
    "P3": _projection(0.54),
    "R0_rect": np.eye(3),
    "Tr_velo_to_cam": _VELO_TO_CAM,
    "Tr_imu_to_velo": _IMU_TO_VELO,
}


class Car(NamedTuple):
    x: float
    y: float
    yaw: float


def _calib_text() -> str:
    return "".join(
        f"{name}: " + " ".join(f"{v:.12e}" for v in matrix.reshape(-1)) + "\n"
        for name, matrix in CALIB.items()
    )


def _velo_to_cam(points: np.ndarray) -> np.ndarray:
    return points @ _VELO_TO_CAM[:, :3].T + _VELO_TO_CAM[:, 3]


def _cam_to_velo(points: np.ndarray) -> np.ndarray:
    return (points - _VELO_TO_CAM[:, 3]) @ _VELO_TO_CAM[:, :3]  # the rotation is orthonormal


def _wrap(angle: float) -> float:
    return (angle + math.pi) % (2 * math.pi) - math.pi


def _corners(x: float, y: float, z: float, yaw: float) -> np.ndarray:
    """The 8 corners (LiDAR frame) of the car whose bottom centre is ``(x, y, z)``."""
    length, width, height = CAR_SIZE
    u, v, t = np.meshgrid([-length / 2, length / 2], [-width / 2, width / 2], [0.0, height])
    c, s = math.cos(yaw), math.sin(yaw)
    u, v, t = u.ravel(), v.ravel(), t.ravel()
    return np.stack([x + c * u - s * v, y + s * u + c * v, z + t], axis=1)


def _label(car: Car) -> Tuple[str, Tuple[float, float, float, float]]:
    """The car's label line, and its box as drawn: LiDAR bottom centre and yaw."""
    length, width, height = CAR_SIZE
    loc = np.round(_velo_to_cam(np.array([[car.x, car.y, GROUND_Z]]))[0], 2)
    rotation_y = round(_wrap(-car.yaw - math.pi / 2), 2)
    x, y, z = _cam_to_velo(loc[None])[0]
    yaw = _wrap(-rotation_y - math.pi / 2)
    corners = _velo_to_cam(_corners(x, y, z, yaw))
    pixels = corners @ CALIB["P2"][:, :3].T + CALIB["P2"][:, 3]
    u, v = pixels[:, 0] / pixels[:, 2], pixels[:, 1] / pixels[:, 2]
    bbox = (
        max(u.min(), 0.0),
        max(v.min(), 0.0),
        min(u.max(), IMAGE_SIZE[0] - 1.0),
        min(v.max(), IMAGE_SIZE[1] - 1.0),
    )
    alpha = _wrap(rotation_y - math.atan2(loc[0], loc[2]))
    fields = ["Car", "0.00", "0", f"{alpha:.2f}", *(f"{b:.2f}" for b in bbox)]
    fields += [f"{height:.2f}", f"{width:.2f}", f"{length:.2f}", *(f"{c:.2f}" for c in loc)]
    fields.append(f"{rotation_y:.2f}")
    return " ".join(fields), (x, y, z, yaw)


def _car_points(box: Tuple[float, float, float, float], rng: np.random.Generator) -> np.ndarray:
    """:data:`CAR_POINTS` points on the four sides and the roof of a box, with intensity."""
    x, y, z, yaw = box
    length, width, height = CAR_SIZE
    n = CAR_POINTS
    local = rng.uniform([-length / 2, -width / 2, 0.0], [length / 2, width / 2, height], (n, 3))
    areas = np.array([width * height, width * height, length * height, length * height])
    areas = np.append(areas, length * width)
    face = rng.choice(5, size=n, p=areas / areas.sum())
    # Faces 0-1: the ends, 2-3: the sides, 4: the roof; 3% inside the box, so that
    # the noise keeps the points in it (create_data counts and crops them by the box).
    inset = 0.97
    local[face == 0, 0], local[face == 1, 0] = -inset * length / 2, inset * length / 2
    local[face == 2, 1], local[face == 3, 1] = -inset * width / 2, inset * width / 2
    local[face == 4, 2] = inset * height
    local += rng.normal(0.0, 0.01, local.shape)
    c, s = math.cos(yaw), math.sin(yaw)
    xyz = np.stack(
        [
            x + c * local[:, 0] - s * local[:, 1],
            y + s * local[:, 0] + c * local[:, 1],
            z + local[:, 2],
        ],
        axis=1,
    )
    return np.concatenate([xyz, rng.uniform(0.7, 1.0, (n, 1))], axis=1)


def _ground_points(rng: np.random.Generator) -> np.ndarray:
    """:data:`GROUND_POINTS` points on the ground in the camera's view, 2-40 m ahead."""
    x = rng.uniform(2.0, 40.0, GROUND_POINTS)
    y = rng.uniform(-0.8, 0.8, GROUND_POINTS) * x
    z = GROUND_Z + rng.normal(0.0, 0.02, GROUND_POINTS)
    return np.stack([x, y, z, rng.uniform(0.1, 0.3, GROUND_POINTS)], axis=1)


def _write_frame(
    folder: Path, index: int, cars: Iterable[Car], rng: np.random.Generator, png: bytes
) -> None:
    name = f"{index:06d}"
    lines, clouds = [], [_ground_points(rng)]
    for car in cars:
        line, box = _label(car)
        lines.append(line)
        clouds.append(_car_points(box, rng))
    np.concatenate(clouds).astype(np.float32).tofile(folder / "velodyne" / f"{name}.bin")
    (folder / "calib" / f"{name}.txt").write_text(_calib_text())
    (folder / "image_2" / f"{name}.png").write_bytes(png)
    if (folder / "label_2").is_dir():
        (folder / "label_2" / f"{name}.txt").write_text("".join(f"{ln}\n" for ln in lines))


def _grey_png() -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", IMAGE_SIZE, (96, 96, 96)).save(out, format="PNG")
    return out.getvalue()


def write_kitti(
    root,
    train: Sequence[Sequence[Car]],
    val: Sequence[Sequence[Car]],
    test: Sequence[Sequence[Car]] = (),
    seed: int = 0,
) -> Path:
    root = Path(root)
    rng = np.random.default_rng(seed)
    png = _grey_png()
    training, testing = root / "training", root / "testing"
    for folder, kinds in ((training, ("velodyne", "calib", "label_2", "image_2")),
                          (testing, ("velodyne", "calib", "image_2"))):  # fmt: skip
        for kind in kinds:
            (folder / kind).mkdir(parents=True, exist_ok=True)
    ids: List[List[int]] = [[], [], []]
    for index, cars in enumerate([*train, *val]):
        _write_frame(training, index, cars, rng, png)
        ids[0 if index < len(train) else 1].append(index)
    for index, cars in enumerate(test):
        _write_frame(testing, index, cars, rng, png)
        ids[2].append(index)
    sets = root / "ImageSets"
    sets.mkdir(exist_ok=True)
    for name, numbers in zip(("train", "val", "test"), ids):
        (sets / f"{name}.txt").write_text("".join(f"{i:06d}\n" for i in numbers))
    return root
