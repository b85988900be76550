"""The random samples of an mmdet3d model, as its pipelines' ``DefaultFormatBundle3D`` and
``Collect3D`` leave them, for ``mmpar.collate``.

A scene holds a few boxes: LiDAR boxes (bottom centres, the car's sizes) on the
ground of the config's point cloud range, Depth boxes (furniture) in a room, or
Camera boxes in front of a camera. The points are uniform in the range with a
cluster inside each box (so that heads find foreground points); their features
past x, y, z are uniform in [0, 1]. Images are normalized noise; the camera's
intrinsics put the boxes in the image, and the metas hold ``cam2img``,
``lidar2img`` and ``depth2img`` (KITTI's axes: camera x = -LiDAR y, y = -LiDAR z,
z = LiDAR x), with the box type and mode of the config's dataset.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Tuple

from mmpar_zoo.codebases.det3d_scene import BOX_POINTS, LIDAR_POINTS, Scene
from mmpar_zoo.images import IMG_NORM, image

#: Boxes per scene.
BOXES = 3
#: LiDAR (x, y, z) -> camera (x, y, z), and Depth (x, y, z) -> camera, as 4x4 rows.
LIDAR2CAM = ((0, -1, 0, 0), (0, 0, -1, 0), (1, 0, 0, 0), (0, 0, 0, 1))
DEPTH2CAM = ((1, 0, 0, 0), (0, 0, -1, 0), (0, 1, 0, 0), (0, 0, 0, 1))


def box_class(box_type: str) -> Tuple[Any, Any]:
    """(boxes class, Box3DMode) of ``LiDAR``, ``Depth`` or ``Camera``."""
    from mmdet3d.core.bbox import get_box_type

    return get_box_type(box_type)


def _uniform(rng: Any, low: Any, high: Any, count: int) -> Any:
    import numpy as np

    low, high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    return low + rng.random((count, len(low))) * (high - low)


def boxes(rng: Any, scene: Scene, count: int = BOXES) -> Any:
    """``count`` boxes (count, box_dim) float32 of the scene's box type: centre (bottom
    for LiDAR and Depth, bottom for Camera's y-down axes), sizes, yaw, velocities."""
    import numpy as np

    x0, y0, z0, x1, y1, z1 = scene.range
    if scene.box_type == "Camera":
        centre = _uniform(rng, (-3, 1.4, 10), (3, 1.7, 30), count)
        sizes = _uniform(rng, (1.5, 1.4, 0.8), (4.2, 1.8, 2.0), count)
    elif scene.box_type == "Depth":
        centre = _uniform(rng, (x0 + 0.8, y0 + 0.8, z0), (x1 - 0.8, y1 - 0.8, z0 + 0.4), count)
        sizes = _uniform(rng, (0.5, 0.5, 0.5), (1.6, 1.6, 1.5), count)
    else:
        mx, my = 0.15 * (x1 - x0), 0.15 * (y1 - y0)
        ground = z0 + min(1.3, 0.3 * (z1 - z0))
        centre = _uniform(rng, (x0 + mx, y0 + my, ground), (x1 - mx, y1 - my, ground + 0.2), count)
        sizes = _uniform(rng, (0.8, 0.6, 1.5), (4.2, 2.0, 1.8), count)
    yaw = _uniform(rng, (-math.pi,), (math.pi,), count)
    if not scene.yaw:
        yaw[:] = 0
    parts = [centre, sizes, yaw]
    if scene.box_dim == 9:
        parts.append(_uniform(rng, (-1, -1), (1, 1), count))
    return np.concatenate(parts, axis=1).astype(np.float32)


def points(rng: Any, scene: Scene, found: Any, split: str = "train") -> Any:
    """The scene's points (N, features) float32: uniform in the range, a cluster in each box."""
    import numpy as np

    per_box = BOX_POINTS if len(found) else 0
    total = scene.points or LIDAR_POINTS + per_box * len(found)
    inside = [_in_box(rng, b, scene.box_type, per_box) for b in found]
    inside = np.concatenate(inside) if inside else np.zeros((0, 3))
    low, high = scene.range[:3], scene.range[3:]
    xyz = np.concatenate([_uniform(rng, low, high, total - len(inside)), inside])
    dims = scene.point_dims if split == "train" else scene.test_point_dims
    extra = rng.random((total, dims - 3))
    return np.concatenate([xyz, extra], axis=1).astype(np.float32)


def _in_box(rng: Any, box: Any, box_type: str, count: int) -> Any:
    """``count`` points (count, 3) inside a LiDAR or Depth box (bottom centre, yaw about z)."""
    import numpy as np

    local = (rng.random((count, 3)) - [0.5, 0.5, 0.0]) * box[3:6]
    c, s = math.cos(box[6]), math.sin(box[6])
    rotated = local @ np.array([[c, s, 0], [-s, c, 0], [0, 0, 1]])
    return rotated + box[:3]


def masks(scene: Scene, pts: Any, found: Any, labels: Any) -> Tuple[Any, Any]:
    """(semantic, instance) labels (N,) int64 of each point: its box's label and index,
    or the ignored class and the background's index outside the boxes."""
    import numpy as np

    semantic = np.full(len(pts), scene.classes, dtype=np.int64)
    instance = np.full(len(pts), len(found), dtype=np.int64)
    for index, box in enumerate(found):
        c, s = math.cos(box[6]), math.sin(box[6])
        d = pts[:, :3] - box[:3]
        local = d @ np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
        half = box[3:6] / 2
        hit = (np.abs(local[:, :2]) <= half[:2]).all(1) & (local[:, 2] >= 0)
        hit &= local[:, 2] <= box[5]
        semantic[hit], instance[hit] = labels[index], index
    return semantic, instance


def calibration(scene: Scene) -> Dict[str, Any]:
    """cam2img, lidar2img, depth2img (4x4 float64): a pinhole camera over the image."""
    import numpy as np

    h, w = scene.image
    focal = 0.8 * w
    cam2img = np.array(
        [[focal, 0, w / 2, 0], [0, focal, h / 2, 0], [0, 0, 1, 0], [0, 0, 0, 1]], dtype=np.float64
    )
    return dict(
        cam2img=cam2img.tolist(),
        cam_intrinsic=cam2img.tolist(),
        lidar2img=cam2img @ np.array(LIDAR2CAM, dtype=np.float64),
        # SUN RGB-D's: 3x3 (ImVoteNet multiplies xyz by its inverse).
        depth2img=cam2img[:3, :3] @ np.array(DEPTH2CAM, dtype=np.float64)[:3, :3],
    )


def meta(scene: Scene, index: int, split: str = "train") -> Dict[str, Any]:
    """An img_metas entry as mmdet3d's Collect3D gives it at the end of ``split``'s pipeline."""
    import numpy as np
    import torch

    cls, mode = box_class(scene.box_type)
    h, w = scene.image
    return dict(
        calibration(scene),
        box_type_3d=cls,
        box_mode_3d=mode,
        sample_idx=index,
        pts_filename=f"zoo_{index}.bin",
        filename=f"zoo_{index}.png",
        ori_shape=(h, w, 3),
        img_shape=(h, w, 3),
        pad_shape=(h, w, 3),
        scale_factor=np.ones(4, dtype=np.float32) if scene.resized[split] else 1.0,
        flip=False,
        pcd_horizontal_flip=False,
        pcd_vertical_flip=False,
        pcd_trans=np.zeros(3),
        pcd_scale_factor=1.0,
        pcd_rotation=torch.eye(3),
        pcd_rotation_angle=0.0,
        transformation_3d_flow=[],
        trans_mat=np.eye(3, dtype=np.float32),
        affine_aug=False,
        img_norm_cfg={k: np.array(v, dtype=np.float32) for k, v in IMG_NORM.items()},
    )


def image_boxes(scene: Scene, found: Any) -> Dict[str, Any]:
    """Camera boxes seen by the camera: 2D boxes (k, 4), centres2d (k, 2), depths (k,)."""
    import torch
    from mmdet3d.core.bbox import CameraInstance3DBoxes, points_cam2img

    cam2img = torch.tensor(calibration(scene)["cam2img"], dtype=torch.float32)
    cam = CameraInstance3DBoxes(torch.from_numpy(found), box_dim=found.shape[1])
    corners = points_cam2img(cam.corners.reshape(-1, 3), cam2img).reshape(-1, 8, 2)
    h, w = scene.image
    low = corners.min(1).values.clamp(min=0)
    high = torch.maximum(corners.max(1).values, low + 2)
    high[:, 0], high[:, 1] = high[:, 0].clamp(max=w - 1), high[:, 1].clamp(max=h - 1)
    centres = points_cam2img(cam.gravity_center, cam2img)
    return dict(
        gt_bboxes=torch.cat([low, high], 1).float(),
        centers2d=centres.float(),
        depths=cam.gravity_center[:, 2].float(),
    )


def flat_boxes(rng: Any, scene: Scene, count: int = BOXES) -> Any:
    """Random 2D boxes (count, 4) float32 x1, y1, x2, y2 in the image."""
    import numpy as np

    h, w = scene.image
    size = rng.uniform(0.2, 0.5, (count, 2)) * np.array([w, h])
    corner = rng.uniform(0, 1, (count, 2)) * (np.array([w, h]) - size)
    return np.concatenate([corner, corner + size], axis=1).astype(np.float32)


def train_sample(scene: Scene, rng: Any, index: int) -> Dict[str, Any]:
    """One training sample: Collect3D's keys as DataContainers, and ``img_metas``."""
    import torch

    from mmpar import DataContainer as DC

    cls, _ = box_class(scene.box_type)
    found = boxes(rng, scene)
    labels = rng.integers(0, scene.classes, len(found))
    values: Dict[str, Any] = {}
    if scene.box_type == "Camera":
        values.update(image_boxes(scene, found))
    pts = points(rng, scene, found) if "points" in scene.keys else None
    if pts is not None and ("pts_semantic_mask" in scene.keys or "pts_instance_mask" in scene.keys):
        semantic, instance = masks(scene, pts, found, labels)
        if scene.seg:
            semantic = rng.integers(0, scene.classes, len(pts))
        values["pts_semantic_mask"] = DC(torch.from_numpy(semantic))
        values["pts_instance_mask"] = DC(torch.from_numpy(instance))
    sample: Dict[str, Any] = {}
    for key in scene.keys:
        if key == "points":
            sample[key] = DC(torch.from_numpy(pts))
        elif key == "img":
            sample[key] = DC(image(rng, scene.image, scene.image), stack=True)
        elif key == "gt_bboxes_3d":
            sample[key] = DC(cls(torch.from_numpy(found), box_dim=found.shape[1]), cpu_only=True)
        elif key in ("gt_labels_3d", "gt_labels"):
            sample[key] = DC(torch.from_numpy(labels))
        elif key == "attr_labels":
            sample[key] = DC(torch.from_numpy(rng.integers(0, scene.attrs, len(found))))
        elif key == "gt_bboxes":
            flat = values.get("gt_bboxes")
            sample[key] = DC(flat if flat is not None else torch.from_numpy(flat_boxes(rng, scene)))
        elif key in ("centers2d", "depths", "pts_semantic_mask", "pts_instance_mask"):
            value = values[key]
            sample[key] = value if isinstance(value, DC) else DC(value)
        else:
            raise ValueError(f"the train pipeline collects {key!r}, which the tool cannot make")
    sample["img_metas"] = DC(meta(scene, index), cpu_only=True)
    return sample


def test_sample(scene: Scene, rng: Any) -> Dict[str, Any]:
    """One test sample: the test pipeline's keys (in lists of one augmentation where it
    flips or scales), and ``img_metas``."""
    import torch

    from mmpar import DataContainer as DC

    sample: Dict[str, Any] = {}
    for key in scene.test_keys:
        if key == "points":
            sample[key] = DC(torch.from_numpy(points(rng, scene, boxes(rng, scene), "test")))
        elif key == "img":
            sample[key] = DC(image(rng, scene.image, scene.image), stack=True)
        else:
            raise ValueError(f"the test pipeline collects {key!r}, which the tool cannot make")
    sample["img_metas"] = DC(meta(scene, 0, "test"), cpu_only=True)
    if scene.test_augs:
        sample = {k: [v] for k, v in sample.items()}
    return sample


def make_batches(scene: Scene, seed: int) -> Tuple[Any, Any]:
    """(train batch of 2 samples, test batch of 1), collated by mmpar."""
    import numpy as np

    from mmpar import collate

    rng = np.random.default_rng(seed)
    samples: List[Dict[str, Any]] = [train_sample(scene, rng, i) for i in range(2)]
    train = collate(samples, samples_per_gpu=len(samples))
    test = collate([test_sample(scene, rng)], samples_per_gpu=1)
    return train, test
