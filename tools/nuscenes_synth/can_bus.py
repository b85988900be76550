"""The CAN bus expansion of each scene: ``<can_bus_root>/can_bus/<scene>_pose.json``.

nuScenes' CAN bus ``pose`` message, at 50 Hz in the recordings and at 10 Hz here, from
half a second before the scene's first key frame to its last: ``utime`` (microseconds),
``pos`` (global metres), ``orientation`` (``[w, x, y, z]``), ``vel``, ``accel`` and
``rotation_rate`` in the ego frame. Temporal camera models (BEVFormer and its
descendants) read the ego motion between frames from it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from nuscenes_synth import world

RATE_HZ = 10


def pose_messages(scene: world.SceneSpec, start_us: int, seconds: float) -> list[dict]:
    """The ``pose`` messages of ``scene`` over ``seconds`` after ``start_us``."""
    messages = []
    steps = int(round((seconds + 0.5) * RATE_HZ)) + 1
    for k in range(steps):
        t = k / RATE_HZ - 0.5
        pose = world.ego_pose(scene, t)
        messages.append(
            {
                "utime": start_us + int(round(t * 1e6)),
                "pos": list(pose.translation),
                "orientation": list(pose.rotation),
                "vel": [world.SPEED, 0.0, 0.0],
                "accel": [0.0, world.SPEED * 0.02, 9.81],
                "rotation_rate": [0.0, 0.0, 0.02],
            }
        )
    return messages


def write_scene(
    can_bus_root: Path, scene_name: str, scene: world.SceneSpec, start_us: int, seconds: float
) -> Path:
    """Write the scene's ``pose`` messages; returns the file written."""
    folder = can_bus_root / "can_bus"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{scene_name}_pose.json"
    path.write_text(json.dumps(pose_messages(scene, start_us, seconds)))
    return path


def heading_of(orientation: list[float]) -> float:
    """The yaw in radians of a ``[w, x, y, z]`` orientation about +z."""
    w, _, _, z = orientation
    return 2 * math.atan2(z, w)
