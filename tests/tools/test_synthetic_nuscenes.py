"""tools/synthetic_nuscenes.py: the synthetic nuScenes is consistent and the devkit reads it.

The tables are checked by their own rules (every token resolves, chains are time-ordered,
each annotation's ``num_lidar_pts`` is the count of its sweep's points in its box, each
object is drawn where its box projects); nuScenes-devkit, from an mmpar install target
(it is not in the main environment), then loads the tables and builds the ground truth
of nuScenes' detection metric from them, in a child process, skipped without a target.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "synthetic_nuscenes.py"
sys.path.insert(0, str(ROOT / "tools"))
from nuscenes_synth import sensors, world  # noqa: E402  (tools/ is not a package)

TARGETS = [pathlib.Path.home() / ".cache" / "mmpar" / n for n in ("mmcv-1.4.0", "mmcv-1.7.0")]
FOREIGN_KEYS = {
    "instance": {"category_token": "category"},
    "calibrated_sensor": {"sensor_token": "sensor"},
    "scene": {"log_token": "log"},
    "sample": {"scene_token": "scene"},
    "sample_data": {
        "sample_token": "sample",
        "ego_pose_token": "ego_pose",
        "calibrated_sensor_token": "calibrated_sensor",
    },
    "sample_annotation": {
        "sample_token": "sample",
        "instance_token": "instance",
        "visibility_token": "visibility",
    },
}


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("data") / "nuscenes"
    done = _run("--out", str(root), "--samples", "3", "--objects", "5")
    assert done.returncode == 0, done.stderr
    return root


def _tables(root: pathlib.Path, version: str) -> dict:
    return {p.stem: json.loads(p.read_text()) for p in (root / version).glob("*.json")}


def test_writes_both_versions_and_the_can_bus(dataset: pathlib.Path) -> None:
    trainval = _tables(dataset, "v1.0-trainval")
    test = _tables(dataset, "v1.0-test")
    assert [s["name"] for s in trainval["scene"]] == ["scene-0001", "scene-0002", "scene-0003"]
    assert [s["name"] for s in test["scene"]] == ["scene-0077"]
    assert len(trainval["sample"]) == 9 and len(test["sample"]) == 3
    assert len(trainval["sample_annotation"]) == 3 * 3 * 5 and not test["sample_annotation"]
    poses = json.loads((dataset.parent / "can_bus" / "scene-0001_pose.json").read_text())
    assert poses[0]["utime"] < trainval["sample"][0]["timestamp"] < poses[-1]["utime"]
    assert {"pos", "orientation", "vel", "accel", "rotation_rate"} <= set(poses[0])


def test_every_token_resolves_and_chains_run_forward_in_time(dataset: pathlib.Path) -> None:
    tables = _tables(dataset, "v1.0-trainval")
    tokens = {name: {r["token"] for r in records} for name, records in tables.items()}
    for table, keys in FOREIGN_KEYS.items():
        for record in tables[table]:
            for key, target in keys.items():
                assert record[key] in tokens[target], (table, key)
    for table in ("sample", "sample_data", "sample_annotation"):
        by_token = {r["token"]: r for r in tables[table]}
        for record in tables[table]:
            if record["next"]:
                after = by_token[record["next"]]
                assert after["prev"] == record["token"]
                if table != "sample_annotation":
                    assert after["timestamp"] > record["timestamp"]
    keyframes = [r for r in tables["sample_data"] if r["is_key_frame"]]
    assert len(keyframes) == 9 * 7  # a key frame of the lidar and the six cameras per sample
    assert all((dataset / r["filename"]).is_file() for r in tables["sample_data"])


def test_lidar_counts_and_images_match_the_boxes(dataset: pathlib.Path) -> None:
    tables = _tables(dataset, "v1.0-trainval")
    poses = {r["token"]: r for r in tables["ego_pose"]}
    calib = {r["token"]: r for r in tables["calibrated_sensor"]}
    anns = tables["sample_annotation"]
    sample = tables["sample"][1]
    category = {c["token"]: c["name"] for c in tables["category"]}
    kind = {i["token"]: category[i["category_token"]] for i in tables["instance"]}
    boxes = [_box(a, kind) for a in anns if a["sample_token"] == sample["token"]]
    counts = [a["num_lidar_pts"] for a in anns if a["sample_token"] == sample["token"]]
    drawn = 0
    for record in tables["sample_data"]:
        if record["sample_token"] != sample["token"] or not record["is_key_frame"]:
            continue
        ego = _pose(poses[record["ego_pose_token"]])
        cal = calib[record["calibrated_sensor_token"]]
        if record["fileformat"] == "pcd":
            points = np.fromfile(dataset / record["filename"], np.float32).reshape(-1, 5)
            in_global = points[:, :3] @ (ego.matrix() @ _pose(cal).matrix())[:3, :3].T
            in_global += (ego.matrix() @ _pose(cal).matrix())[:3, 3]
            assert [int(sensors.points_in_box(in_global, b).sum()) for b in boxes] == counts
            continue
        camera = world.Sensor(
            "cam", "camera", _pose(cal), tuple(map(tuple, cal["camera_intrinsic"]))
        )
        image = np.asarray(Image.open(dataset / record["filename"])).astype(int)
        for box in boxes:
            centre = sensors.global_to_sensor(np.asarray([box.center]), ego, camera)[0]
            if (
                centre[2] < 1.0
                or min(sensors.global_to_sensor(box.corners(), ego, camera)[:, 2]) < 0.5
            ):
                continue
            u, v, w = np.asarray(cal["camera_intrinsic"]) @ centre
            if 0 <= u / w < 1600 and 0 <= v / w < 900:
                pixel = image[int(v / w), int(u / w)]
                expected = np.asarray(sensors.COLOURS[box.category])
                drawn += int(np.abs(pixel - expected).max() <= 12)
    assert drawn > 0


def _pose(record: dict) -> world.Pose:
    return world.Pose(tuple(record["translation"]), tuple(record["rotation"]))


def _box(ann: dict, kind: dict) -> world.Box:
    w, _, _, z = ann["rotation"]
    yaw = 2 * float(np.arctan2(z, w))
    category = kind[ann["instance_token"]]
    return world.Box(0, category, "", tuple(ann["translation"]), tuple(ann["size"]), yaw)


def test_bad_arguments_are_one_error_line_and_exit_2(tmp_path: pathlib.Path) -> None:
    done = _run("--out", str(tmp_path / "n"), "--val-scenes", "9")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --val-scenes: expected 0 to 5 for v1.0-trainval, got 9"
    ]
    assert not (tmp_path / "n").exists()


DEVKIT_CHECK = """
import sys
from nuscenes.nuscenes import NuScenes
from nuscenes.eval.common.loaders import load_gt
from nuscenes.eval.detection.data_classes import DetectionBox
nusc = NuScenes('v1.0-trainval', sys.argv[1], verbose=False)
gt = load_gt(nusc, 'val', DetectionBox, verbose=False)
print(len(gt.sample_tokens), sum(len(gt[t]) for t in gt.sample_tokens))
ann = nusc.get('sample_annotation', nusc.sample[1]['anns'][0])
print(round(float(abs(nusc.box_velocity(ann['token'])[:2]).max()), 3))
"""


def test_nuscenes_devkit_reads_it_and_builds_the_metrics_ground_truth(
    dataset: pathlib.Path,
) -> None:
    target = next((t for t in TARGETS if (t / "nuscenes").is_dir()), None)
    if target is None:
        pytest.skip("no mmpar install target with nuscenes-devkit")
    done = subprocess.run(
        [sys.executable, "-c", DEVKIT_CHECK, str(dataset)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    samples, boxes, speed = done.stdout.split()
    assert (int(samples), int(boxes)) == (3, 15)  # the val scene's key frames and objects
    assert float(speed) > 0  # the first object, a car, moves
