"""The scene content of the synthetic nuScenes: ego route, objects and the sensor rig.

Frames follow nuScenes' conventions: global and ego frames are x forward/left/up (ego:
x forward, y left, z up); a camera frame is x right, y down, z forward; rotations are
unit quaternions ``[w, x, y, z]`` mapping the child frame into its parent. Everything is
a deterministic function of the scene index and the seed.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

KEYFRAME_US = 500_000  # nuScenes annotates at 2 Hz
IMAGE_SIZE = (1600, 900)  # width, height of every nuScenes camera
START_US = 1_533_151_603_547_590
SPEED = 4.0  # metres per second along the route

# (channel, yaw of the optical axis in the ego frame in degrees, focal length in pixels)
CAMERAS = (
    ("CAM_FRONT", 0.0, 1266.4),
    ("CAM_FRONT_RIGHT", -55.0, 1260.8),
    ("CAM_FRONT_LEFT", 55.0, 1272.6),
    ("CAM_BACK", 180.0, 809.2),
    ("CAM_BACK_LEFT", 110.0, 1256.7),
    ("CAM_BACK_RIGHT", -110.0, 1259.5),
)
LIDAR = "LIDAR_TOP"
LIDAR_TRANSLATION = (0.985, 0.0, 1.84)

# (nuScenes category, attribute or "", size w, l, h in metres, speed in m/s)
OBJECT_KINDS = (
    ("vehicle.car", "vehicle.moving", (1.9, 4.6, 1.7), 3.0),
    ("human.pedestrian.adult", "pedestrian.moving", (0.7, 0.7, 1.8), 1.2),
    ("vehicle.truck", "vehicle.parked", (2.5, 7.0, 3.0), 0.0),
    ("movable_object.barrier", "", (2.4, 0.5, 1.0), 0.0),
    ("movable_object.trafficcone", "", (0.4, 0.4, 1.0), 0.0),
    ("vehicle.bicycle", "cycle.with_rider", (0.6, 1.7, 1.3), 2.0),
    ("vehicle.bus.rigid", "vehicle.stopped", (2.9, 11.0, 3.5), 0.0),
    ("vehicle.motorcycle", "cycle.with_rider", (0.8, 2.1, 1.5), 4.0),
    ("vehicle.trailer", "vehicle.parked", (2.3, 10.0, 3.8), 0.0),
    ("vehicle.construction", "vehicle.parked", (2.8, 6.5, 3.2), 0.0),
)


def yaw_quaternion(yaw: float) -> list[float]:
    """The quaternion ``[w, x, y, z]`` of a rotation by ``yaw`` radians about +z."""
    return [math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]


def matrix_quaternion(rotation: np.ndarray) -> list[float]:
    """The unit quaternion ``[w, x, y, z]`` of a proper 3x3 rotation matrix."""
    m = np.asarray(rotation, dtype=np.float64)
    w = math.sqrt(max(0.0, 1.0 + m[0, 0] + m[1, 1] + m[2, 2])) / 2
    x = math.copysign(math.sqrt(max(0.0, 1.0 + m[0, 0] - m[1, 1] - m[2, 2])) / 2, m[2, 1] - m[1, 2])
    y = math.copysign(math.sqrt(max(0.0, 1.0 - m[0, 0] + m[1, 1] - m[2, 2])) / 2, m[0, 2] - m[2, 0])
    z = math.copysign(math.sqrt(max(0.0, 1.0 - m[0, 0] - m[1, 1] + m[2, 2])) / 2, m[1, 0] - m[0, 1])
    q = np.array([w, x, y, z])
    return (q / np.linalg.norm(q)).tolist()


def quaternion_matrix(q: list[float]) -> np.ndarray:
    """The 3x3 rotation matrix of a unit quaternion ``[w, x, y, z]``."""
    w, x, y, z = q
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


@dataclasses.dataclass(frozen=True)
class Pose:
    """A rigid transform child -> parent: ``p_parent = rotation @ p_child + translation``."""

    translation: tuple[float, float, float]
    rotation: tuple[float, float, float, float]  # [w, x, y, z]

    def matrix(self) -> np.ndarray:
        """The 4x4 homogeneous matrix of the transform."""
        out = np.eye(4)
        out[:3, :3] = quaternion_matrix(list(self.rotation))
        out[:3, 3] = self.translation
        return out


@dataclasses.dataclass(frozen=True)
class Sensor:
    """One sensor of the rig: its channel, its pose in the ego frame, its intrinsics."""

    channel: str
    modality: str  # "camera" or "lidar"
    to_ego: Pose
    intrinsic: tuple[tuple[float, ...], ...] | None  # 3x3 for cameras


@dataclasses.dataclass(frozen=True)
class Box:
    """An annotated object at one instant, in the global frame."""

    instance: int
    category: str
    attribute: str
    center: tuple[float, float, float]
    size: tuple[float, float, float]  # w, l, h
    yaw: float

    def corners(self) -> np.ndarray:
        """The (8, 3) corners in the global frame."""
        w, length, h = self.size
        xs = np.array([1, 1, -1, -1, 1, 1, -1, -1]) * length / 2
        ys = np.array([1, -1, -1, 1, 1, -1, -1, 1]) * w / 2
        zs = np.array([-1, -1, -1, -1, 1, 1, 1, 1]) * h / 2
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        local = np.stack([xs, ys, zs], axis=1)
        rot = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
        return local @ rot.T + np.asarray(self.center)


def camera_sensor(channel: str, yaw_deg: float, focal: float) -> Sensor:
    """A camera looking along ``yaw_deg`` in the ego frame, 1.5 m up, on the body's edge."""
    yaw = math.radians(yaw_deg)
    forward = np.array([math.cos(yaw), math.sin(yaw), 0.0])
    right = np.array([math.sin(yaw), -math.cos(yaw), 0.0])
    down = np.array([0.0, 0.0, -1.0])
    rotation = np.stack([right, down, forward], axis=1)  # columns: camera axes in ego
    offset = forward * np.array([1.7, 0.5, 0.0]) + np.array([0.0, 0.0, 1.5])
    width, height = IMAGE_SIZE
    intrinsic = ((focal, 0.0, width / 2), (0.0, focal, height / 2), (0.0, 0.0, 1.0))
    pose = Pose(tuple(float(v) for v in offset), tuple(matrix_quaternion(rotation)))
    return Sensor(channel, "camera", pose, intrinsic)


def rig() -> list[Sensor]:
    """The lidar (x right, y forward, as nuScenes' LIDAR_TOP) and the six cameras."""
    lidar_rotation = tuple(yaw_quaternion(-math.pi / 2))
    sensors = [Sensor(LIDAR, "lidar", Pose(LIDAR_TRANSLATION, lidar_rotation), None)]
    sensors += [camera_sensor(*spec) for spec in CAMERAS]
    return sensors


@dataclasses.dataclass(frozen=True)
class SceneSpec:
    """What varies between scenes: where the route starts, its heading and the objects."""

    index: int
    origin: tuple[float, float]
    heading: float
    num_objects: int
    seed: int


def ego_pose(scene: SceneSpec, t: float) -> Pose:
    """The ego pose ``t`` seconds into the scene: a gentle left curve at SPEED."""
    turn = 0.02  # rad/s
    yaw = scene.heading + turn * t
    if abs(turn) > 1e-9:
        dx = SPEED / turn * (math.sin(yaw) - math.sin(scene.heading))
        dy = -SPEED / turn * (math.cos(yaw) - math.cos(scene.heading))
    else:
        dx, dy = SPEED * t * math.cos(yaw), SPEED * t * math.sin(yaw)
    return Pose((scene.origin[0] + dx, scene.origin[1] + dy, 0.0), tuple(yaw_quaternion(yaw)))


def route(scene: SceneSpec, seconds: float, step: float = 0.5) -> np.ndarray:
    """The (N, 3) ``x, y, yaw`` of the ego route over ``seconds``, every ``step`` seconds."""
    out = []
    for t in np.arange(0.0, seconds + step / 2, step):
        pose = ego_pose(scene, float(t))
        w, _, _, z = pose.rotation
        out.append((pose.translation[0], pose.translation[1], 2 * math.atan2(z, w)))
    return np.asarray(out)


def objects(scene: SceneSpec, t: float) -> list[Box]:
    """The annotated objects ``t`` seconds into the scene, in the global frame.

    Objects start 6 to 35 m from the route's start, around the ego, and move at their
    kind's speed along their own heading; each keeps its instance index across frames.
    """
    rng = np.random.default_rng(scene.seed * 7919 + scene.index)
    boxes = []
    for i in range(scene.num_objects):
        category, attribute, size, speed = OBJECT_KINDS[i % len(OBJECT_KINDS)]
        distance = rng.uniform(6.0, 35.0)
        bearing = scene.heading + rng.uniform(-math.pi, math.pi)
        heading = scene.heading + rng.choice([0.0, math.pi / 2, math.pi]) + rng.normal(0, 0.1)
        x0 = scene.origin[0] + distance * math.cos(bearing)
        y0 = scene.origin[1] + distance * math.sin(bearing)
        x = x0 + speed * t * math.cos(heading)
        y = y0 + speed * t * math.sin(heading)
        center = (float(x), float(y), size[2] / 2)
        boxes.append(Box(i, category, attribute, center, size, float(heading)))
    return boxes
