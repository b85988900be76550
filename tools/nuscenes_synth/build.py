"""Write a synthetic nuScenes: every version's tables and the files they name."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
from PIL import Image

from nuscenes_synth import can_bus, sensors, tables, world


@dataclasses.dataclass(frozen=True)
class Settings:
    """How much to write.

    Attributes:
        scenes: scenes per split, e.g. ``{"train": 2, "val": 1, "test": 1}``.
        samples: key frames (annotated samples, 2 Hz) per scene.
        sweeps: frames of every sensor between two key frames, without annotations.
        objects: annotated objects per scene.
        seed: the seed of every random choice.
    """

    scenes: dict
    samples: int = 4
    sweeps: int = 1
    objects: int = 8
    seed: int = 0


def frame_times(settings: Settings) -> list[tuple[float, int]]:
    """``(seconds, key frame index or -1)`` of every frame of a scene, in time order."""
    out = []
    step = world.KEYFRAME_US / 1e6
    for i in range(settings.samples):
        out.append((i * step, i))
        if i + 1 < settings.samples:
            for j in range(1, settings.sweeps + 1):
                out.append((i * step + j * step / (settings.sweeps + 1), -1))
    return out


def scene_spec(name: str, settings: Settings) -> world.SceneSpec:
    """Where the scene named ``name`` drives: a start spread over the map by its number."""
    number = int(name[-4:])
    origin = (400.0 + 37.0 * (number % 29), 900.0 + 53.0 * (number % 23))
    heading = math.radians((number * 47) % 360)
    return world.SceneSpec(number, origin, heading, settings.objects, settings.seed)


def write_scene(
    root: Path, tab: tables.Tables, name: str, settings: Settings, annotate: bool
) -> dict:
    """Write one scene's records and files; returns its log record."""
    version = tab.version
    spec = scene_spec(name, settings)
    log = tab.add("log", tables.log_record(version, name))
    rig = world.rig()
    calibrations = {s.channel: tables.calibrated_sensor_record(version, name, s) for s in rig}
    for record in calibrations.values():
        tab.add("calibrated_sensor", record)
    start = world.START_US + spec.index * 10_000_000
    scene_token = tables.token(version, "scene", name)
    samples = [
        {
            "token": tables.token(version, "sample", name, i),
            "timestamp": start + i * world.KEYFRAME_US,
            "scene_token": scene_token,
        }
        for i in range(settings.samples)
    ]
    tables.link(samples)
    for record in samples:
        tab.add("sample", record)
    rng = np.random.default_rng(settings.seed * 104729 + spec.index)
    chains: dict[str, list[dict]] = {s.channel: [] for s in rig}
    annotations: dict[int, list[dict]] = {}
    for seconds, key in frame_times(settings):
        timestamp = start + int(round(seconds * 1e6))
        ego = world.ego_pose(spec, seconds)
        boxes = world.objects(spec, seconds)
        sample = samples[key] if key >= 0 else samples[int(seconds / 0.5) + 1]
        for sensor in rig:
            record = _sample_data(root, tab, log, sensor, calibrations, sample, timestamp, key)
            chains[sensor.channel].append(record)
            tab.add(
                "ego_pose",
                {"token": record["ego_pose_token"], "timestamp": timestamp}
                | {"translation": list(ego.translation), "rotation": list(ego.rotation)},
            )
            if sensor.modality == "camera":
                sensors.write_image(
                    root / record["filename"], sensors.render_camera(boxes, ego, sensor)
                )
                continue
            points, counts = sensors.lidar_sweep(boxes, ego, sensor, rng)
            sensors.write_points(root / record["filename"], points)
            if key >= 0 and annotate:
                for box, count in zip(boxes, counts):
                    ann = tables.annotation_record(version, sample["token"], box, name, count)
                    ann["category"] = box.category
                    annotations.setdefault(box.instance, []).append(ann)
    for chain in chains.values():
        tables.link(chain)
    for anns in annotations.values():
        tables.link(anns)
        tab.add("instance", tables.instance_record(version, name, anns))
        for ann in anns:
            tab.add("sample_annotation", ann)
    tab.add(
        "scene",
        {
            "token": scene_token,
            "log_token": log["token"],
            "nbr_samples": len(samples),
            "first_sample_token": samples[0]["token"],
            "last_sample_token": samples[-1]["token"],
            "name": name,
            "description": "synthetic",
        },
    )
    return log


def _sample_data(root, tab, log, sensor, calibrations, sample, timestamp, key) -> dict:
    folder = "samples" if key >= 0 else "sweeps"
    suffix = "jpg" if sensor.modality == "camera" else "pcd.bin"
    channel = sensor.channel
    filename = f"{folder}/{channel}/{log['logfile']}__{channel}__{timestamp}.{suffix}"
    width, height = world.IMAGE_SIZE if sensor.modality == "camera" else (0, 0)
    data_token = tables.token(tab.version, "sample_data", channel, timestamp)
    return tab.add(
        "sample_data",
        {
            "token": data_token,
            "sample_token": sample["token"],
            "ego_pose_token": tables.token(tab.version, "ego_pose", channel, timestamp),
            "calibrated_sensor_token": calibrations[channel]["token"],
            "timestamp": timestamp,
            "fileformat": "jpg" if sensor.modality == "camera" else "pcd",
            "is_key_frame": key >= 0,
            "height": height,
            "width": width,
            "filename": filename,
        },
    )


def write_version(
    root: Path, can_bus_root: Path | None, version: str, settings: Settings
) -> tuple[Path, list[np.ndarray]]:
    """Write one version's scenes, tables, map mask and CAN bus.

    Returns:
        The version's table folder and the (N, 3) ``x, y, yaw`` route of each scene.
    """
    tab = tables.Tables(version)
    logs = []
    routes = []
    for split, names in tables.SPLIT_SCENES[version].items():
        for name in names[: settings.scenes.get(split, 0)]:
            logs.append(write_scene(root, tab, name, settings, annotate=split != "test"))
            spec = scene_spec(name, settings)
            seconds = (settings.samples - 1) * world.KEYFRAME_US / 1e6
            routes.append(world.route(spec, seconds + 20.0))
            if can_bus_root is not None:
                start = world.START_US + spec.index * 10_000_000
                can_bus.write_scene(can_bus_root, name, spec, start, seconds)
    record = tab.add("map", tables.map_record(version, [log["token"] for log in logs]))
    mask = root / record["filename"]
    mask.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((200, 200), 255, np.uint8)).save(mask)
    return tab.write(root), routes


def generate(
    root: Path, can_bus_root: Path | None, versions: list[str], settings: Settings
) -> list[Path]:
    """Write ``versions`` under ``root`` (CAN bus under ``can_bus_root``); their folders."""
    folders, routes = [], []
    for version in versions:
        folder, version_routes = write_version(root, can_bus_root, version, settings)
        folders.append(folder)
        routes += version_routes
    _write_map_expansion(root, routes)
    return folders


def _write_map_expansion(root: Path, routes: list[np.ndarray]) -> None:
    """The map expansion of all four locations (research code opens every one)."""
    from nuscenes_synth import maps

    maps.write_expansions(root, {tables.LOCATION: routes})
