"""The nuScenes metadata tables of one dataset version, as the devkit reads them.

Thirteen JSON tables under ``<root>/<version>/``: the fixed vocabularies (``category``,
``attribute``, ``visibility``, ``sensor``) and the recorded ones (``log``, ``map``,
``scene``, ``sample``, ``sample_data``, ``ego_pose``, ``calibrated_sensor``, ``instance``,
``sample_annotation``), linked by 32-digit hexadecimal tokens.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from nuscenes_synth import world

TABLES = (
    "category",
    "attribute",
    "visibility",
    "instance",
    "sensor",
    "calibrated_sensor",
    "ego_pose",
    "log",
    "scene",
    "sample",
    "sample_data",
    "sample_annotation",
    "map",
)

# Scene names of nuScenes' official splits (nuscenes.utils.splits), so that the devkit's
# split lookup, and the converters and evaluations built on it, find these scenes.
SPLIT_SCENES = {
    "v1.0-trainval": {
        "train": ("scene-0001", "scene-0002", "scene-0004", "scene-0005", "scene-0006"),
        "val": ("scene-0003", "scene-0012", "scene-0013", "scene-0014", "scene-0015"),
    },
    "v1.0-test": {"test": ("scene-0077", "scene-0078", "scene-0079", "scene-0080")},
    "v1.0-mini": {
        "train": ("scene-0061", "scene-0553", "scene-0655", "scene-0757", "scene-0796"),
        "val": ("scene-0103", "scene-0916"),
    },
}
VERSIONS = tuple(SPLIT_SCENES)
LOCATION = "boston-seaport"
VISIBILITY = (("1", "v0-40"), ("2", "v40-60"), ("3", "v60-80"), ("4", "v80-100"))
ATTRIBUTES = (
    "vehicle.moving",
    "vehicle.stopped",
    "vehicle.parked",
    "cycle.with_rider",
    "cycle.without_rider",
    "pedestrian.sitting_lying_down",
    "pedestrian.standing",
    "pedestrian.moving",
)


def token(*parts: object) -> str:
    """A stable 32-digit hexadecimal token for the record named by ``parts``."""
    return hashlib.md5("/".join(str(p) for p in parts).encode()).hexdigest()


class Tables:
    """The records of one version's tables, appended in order and written as JSON."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.records: dict[str, list[dict]] = {name: [] for name in TABLES}
        self._vocabularies()

    def add(self, table: str, record: dict) -> dict:
        """Append ``record`` (with its ``token``) to ``table`` and return it."""
        self.records[table].append(record)
        return record

    def write(self, root: Path) -> Path:
        """Write every table to ``root/<version>/<table>.json``; returns that folder."""
        folder = root / self.version
        folder.mkdir(parents=True, exist_ok=True)
        for name, records in self.records.items():
            (folder / f"{name}.json").write_text(json.dumps(records, indent=0))
        return folder

    def _vocabularies(self) -> None:
        for category, *_ in world.OBJECT_KINDS:
            self.add(
                "category",
                {"token": token("category", category), "name": category, "description": ""},
            )
        for name in ATTRIBUTES:
            self.add(
                "attribute", {"token": token("attribute", name), "name": name, "description": ""}
            )
        for key, level in VISIBILITY:
            self.add("visibility", {"token": key, "level": level, "description": ""})
        for sensor in world.rig():
            self.add(
                "sensor",
                {
                    "token": token("sensor", sensor.channel),
                    "channel": sensor.channel,
                    "modality": sensor.modality,
                },
            )


def link(records: list[dict]) -> None:
    """Set ``prev`` / ``next`` of consecutive records (a time-ordered chain)."""
    for i, record in enumerate(records):
        record["prev"] = records[i - 1]["token"] if i > 0 else ""
        record["next"] = records[i + 1]["token"] if i + 1 < len(records) else ""


def log_record(version: str, scene_name: str) -> dict:
    """The log of one scene (each scene is its own drive here)."""
    number = int(scene_name[-4:])
    logfile = f"n015-2018-07-{10 + number % 18:02d}-11-22-45+0800"
    return {
        "token": token(version, "log", scene_name),
        "logfile": logfile,
        "vehicle": "n015",
        "date_captured": logfile[5:15],
        "location": LOCATION,
    }


def calibrated_sensor_record(version: str, scene_name: str, sensor: world.Sensor) -> dict:
    """The calibration of ``sensor`` on the drive of ``scene_name``."""
    intrinsic = [list(row) for row in sensor.intrinsic] if sensor.intrinsic else []
    return {
        "token": token(version, "calibrated_sensor", scene_name, sensor.channel),
        "sensor_token": token("sensor", sensor.channel),
        "translation": list(sensor.to_ego.translation),
        "rotation": list(sensor.to_ego.rotation),
        "camera_intrinsic": intrinsic,
    }


def annotation_record(
    version: str, sample_token: str, box: world.Box, scene_name: str, num_lidar_pts: int
) -> dict:
    """One object's box at one key frame; ``prev``/``next`` are linked afterwards."""
    return {
        "token": token(version, "annotation", sample_token, box.instance),
        "sample_token": sample_token,
        "instance_token": token(version, "instance", scene_name, box.instance),
        "visibility_token": "4",
        "attribute_tokens": [token("attribute", box.attribute)] if box.attribute else [],
        "translation": list(box.center),
        "size": list(box.size),
        "rotation": world.yaw_quaternion(box.yaw),
        "num_lidar_pts": int(num_lidar_pts),
        "num_radar_pts": 0,
    }


def instance_record(version: str, scene_name: str, annotations: list[dict]) -> dict:
    """The instance that a time-ordered list of annotations of one object belongs to."""
    first = annotations[0]
    return {
        "token": first["instance_token"],
        "category_token": token("category", first.pop("category")),
        "nbr_annotations": len(annotations),
        "first_annotation_token": first["token"],
        "last_annotation_token": annotations[-1]["token"],
    }


def map_record(version: str, log_tokens: list[str]) -> dict:
    """The semantic prior map of the location; its mask is ``maps/<token>.png``."""
    map_token = token(version, "map", LOCATION)
    return {
        "token": map_token,
        "log_tokens": log_tokens,
        "category": "semantic_prior",
        "filename": f"maps/{map_token}.png",
    }
