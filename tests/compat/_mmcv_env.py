"""The environment of the interop tests against the real mmcv 1.x and mmdet 2.x.

CI installs mmcv 1.7.2 (pure Python, no compiled ops), mmdet 2.28.2 and the other
codebases with ``python -m mmpar.compat.install`` (``.ci/run``), and mmcv 1.7.0 with
mmpose and mmaction2 into ``MMCV_170_DIR``; on a machine without them these tests skip.

``MMCV_170_DIR``, ``requires_mmcv170``, ``mmcv170_env(**extra) -> dict``
    The folder holding mmcv 1.7.0 (and mmpose 0.29.0, mmaction2 0.24.1 and their
    requirements where the main environment lacks them): these codebases refuse
    mmcv > 1.7.0 on import. ``.ci/run`` installs it with ``python -m
    mmpar.compat.install --target``; ``$MMPAR_MMCV_170_DIR`` moves it. The marker
    skips where it holds no mmcv 1.7.0; ``mmcv170_env`` is :func:`child_env` with
    the folder right after this checkout on ``PYTHONPATH``, so that a child
    imports mmcv 1.7.0 (and, from the main environment, everything else).

``requires_mmcv`` / ``requires_mmdet``
    ``pytest.mark.skipif`` markers: mmcv 1.x (``mmcv`` or ``mmcv-full``) /
    mmdet 2.x installed. Decided from the installed distributions' metadata,
    without importing either package.

``install_stand_ins()``
    Idempotent. Makes ``import mmcv.runner`` and ``import mmdet.datasets`` work
    on a machine without torchvision and without mmcv's compiled ops:

    - a bare ``torchvision`` module (``__mmpar_stand_in__ = True``, nothing
      else), registered only when no torchvision is importable. mmcv.runner
      imports torchvision for model-zoo URLs only. (mmcv's ``collect_env``
      reads ``torchvision.__version__`` and so fails with the stand-in: do not
      call it.)
    - mmpar's own ops as ``mmcv.ops`` (``mmpar.compat.mmcv_ops.supply_mmcv_ops``,
      what ``patch_mmcv()`` does), when mmcv is installed, its compiled extension
      ``mmcv._ext`` is not, and torchvision's kernels load.
    - otherwise, without torchvision's kernels, an ``mmcv.ops`` stand-in,
      registered only when mmcv is installed and its
      compiled extension ``mmcv._ext`` is not (every real op loads it, so the
      real ``mmcv.ops`` cannot import). Any name looked up on it, or on any
      ``mmcv.ops.<submodule>`` (created on import), is a class whose
      instantiation or call raises ``RuntimeError``: it serves imports only,
      never a result. Deciding from ``mmcv._ext`` rather than by trying the
      import keeps this function from importing anything beyond ``mmcv``
      itself -- in particular never ``mmcv.parallel`` -- so it may run before
      or after ``mmpar.compat.patch_mmcv()``.

    Child processes (``subprocess`` scripts, ``torchrun`` workers) call it
    themselves, first thing: the scripts under ``tests/compat/scripts/`` put
    the repository root on ``sys.path`` (from their own ``__file__``) and run
    ``from tests.compat._mmcv_env import install_stand_ins;
    install_stand_ins()``. No ``sitecustomize`` and no stub directory on
    ``PYTHONPATH``: a stub package cannot stand in for ``mmcv.ops`` (a
    sub-package of the installed mmcv) and could shadow a real torchvision.

``child_env(**extra) -> dict``
    ``os.environ`` plus ``PYTHONPATH`` = this checkout's root first (children
    import this checkout's ``mmpar`` and the ``tests`` helpers), and ``extra``;
    without ``$MMPAR_MMCV_OPS*``, so that each child chooses (and announces) its
    ops itself, and without a launcher's variables (``RANK``, ``SLURM_PROCID``,
    ...) that another test may have left in this process: each child is a fresh
    launch (a stray ``RANK=1`` would also silence its announcement).

``run_python(code) -> str``
    Run ``python -c code`` in a child (:func:`child_env`, the checkout as cwd, 120 s at
    most); fail with its stderr unless it exits 0; its stdout.

``mmdet_train_pipeline(flip_ratio=0.5, img_scale=(96, 64)) -> list``
    mmdet's standard detection train pipeline as config dicts (loading, boxes,
    keep-ratio resize, flip, normalize, pad to 32, format bundle, collect of
    ``img``, ``gt_bboxes``, ``gt_labels``).

``write_small_coco(root) -> (ann_file, img_prefix, classes)``
    A small COCO-format dataset under ``root`` (see ``SMALL_COCO``): images of
    different sizes and orientations as real JPEG and PNG files (every side
    >= 32 px: mmdet's ``CocoDataset`` drops smaller images in training), every
    image with at least one box. ``classes`` is the category names, for
    ``CocoDataset(classes=...)`` (its default is COCO's 80 classes).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import types
from importlib import metadata
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Optional, Sequence, Tuple

import pytest

from tests._coco_files import write_coco_files

__all__ = [
    "MMCV_170_DIR",
    "REPO_ROOT",
    "SMALL_COCO",
    "child_env",
    "install_stand_ins",
    "mmcv170_env",
    "mmcv_version",
    "mmdet_version",
    "mmdet_train_pipeline",
    "requires_mmcv",
    "requires_mmcv170",
    "requires_mmdet",
    "requires_mmpar_ops",
    "requires_torchvision",
    "run_python",
    "compiled_ops_installed",
    "torchvision_kernels",
    "write_small_coco",
]

REPO_ROOT = Path(__file__).resolve().parents[2]


def _dist_version(*names: str) -> Optional[str]:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def mmcv_version() -> Optional[str]:
    return _dist_version("mmcv", "mmcv-full")


def mmdet_version() -> Optional[str]:
    return _dist_version("mmdet")


def _major(version: Optional[str]) -> Optional[str]:
    return None if version is None else version.split(".")[0]


requires_mmcv = pytest.mark.skipif(
    _major(mmcv_version()) != "1",
    reason=f"needs mmcv 1.x (installed: {mmcv_version()}); see python -m mmpar.compat.install",
)
requires_mmdet = pytest.mark.skipif(
    _major(mmcv_version()) != "1" or _major(mmdet_version()) != "2",
    reason=(
        f"needs mmcv 1.x and mmdet 2.x (installed: {mmcv_version()}, {mmdet_version()}); "
        "see python -m mmpar.compat.install"
    ),
)


#: mmcv 1.7.0 beside the main mmcv, for mmpose and mmaction2 (the default is also .ci/run's).
MMCV_170_DIR = Path(
    os.environ.get("MMPAR_MMCV_170_DIR")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mmpar" / "mmcv-1.7.0"
)


def _mmcv170_installed() -> bool:
    found = metadata.distributions(name="mmcv", path=[str(MMCV_170_DIR)])
    return any(dist.version == "1.7.0" for dist in found)


requires_mmcv170 = pytest.mark.skipif(
    not _mmcv170_installed(),
    reason=(
        f"needs mmcv 1.7.0 in {MMCV_170_DIR} ($MMPAR_MMCV_170_DIR): python -m "
        "mmpar.compat.install --target DIR mmpose mmaction2 installs it (.ci/run does)"
    ),
)


# --------------------------------------------------------------------------- stand-ins

_STAND_IN_ERROR = (
    "{name} is a test stand-in for mmcv's compiled ops (mmcv was installed without "
    "them); it exists so that modules importing it can be imported, not to be used"
)


def _stand_in_class(qualname: str) -> type:
    def refuse(*args, **kwargs):
        raise RuntimeError(_STAND_IN_ERROR.format(name=qualname))

    # A class (not a function): some importers subclass ops or use them in
    # isinstance checks at import time.
    return type(qualname.rsplit(".", 1)[-1], (), {"__new__": refuse, "__mmpar_stand_in__": True})


class _StandInOps(types.ModuleType):
    __mmpar_stand_in__ = True

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _stand_in_class(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StandInOpsFinder(MetaPathFinder, Loader):
    """Creates ``mmcv.ops.<anything>`` stand-in submodules on import."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("mmcv.ops."):
            return ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StandInOps(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def _torchvision_importable() -> bool:
    mod = sys.modules.get("torchvision")
    if mod is not None:
        return True
    return importlib.util.find_spec("torchvision") is not None


def torchvision_kernels() -> bool:
    """Whether torchvision's compiled kernels load (what mmpar's mmcv.ops run on)."""
    try:
        import torch
        import torchvision  # noqa: F401

        torch.ops.torchvision.nms
    except Exception:
        return False
    return not getattr(sys.modules.get("torchvision"), "__mmpar_stand_in__", False)


requires_torchvision = pytest.mark.skipif(
    not torchvision_kernels(),
    reason='needs torchvision with its compiled kernels: pip install -e ".[mmcv-ops]"',
)


def compiled_ops_installed() -> bool:
    """Whether mmcv-full's compiled ops are installed (looked for, not imported)."""
    spec = importlib.util.find_spec("mmcv")
    folders = [] if spec is None else list(spec.submodule_search_locations or [])
    return any(next(Path(folder).glob("_ext*.so"), None) for folder in folders)


requires_mmpar_ops = pytest.mark.skipif(
    compiled_ops_installed(),
    reason="mmcv-full's compiled ops are installed: by default mmcv.ops stay mmcv's",
)

#: What ``supply_mmcv_ops`` writes to the environment for child processes.
OPS_ENV_VARS = ("MMPAR_MMCV_OPS", "MMPAR_MMCV_OPS_ANNOUNCED")
#: Where launchers (torchrun, SLURM, Open MPI) tell a process its place in a run.
LAUNCH_ENV_VARS = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
    "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODELIST",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
)  # fmt: skip


def install_stand_ins() -> None:
    if not _torchvision_importable():
        tv = types.ModuleType("torchvision")
        tv.__mmpar_stand_in__ = True
        sys.modules["torchvision"] = tv
    if mmcv_version() is None or "mmcv.ops" in sys.modules:
        return
    if importlib.util.find_spec("mmcv._ext") is not None:
        return  # mmcv-full with compiled ops: the real mmcv.ops imports
    if torchvision_kernels():
        from mmpar.compat.mmcv_ops import supply_mmcv_ops

        saved = {k: os.environ.get(k) for k in OPS_ENV_VARS}
        supply_mmcv_ops()
        for key, value in saved.items():  # the tests' children choose, and announce, anew
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        return
    import mmcv

    ops = _StandInOps("mmcv.ops")
    ops.__path__ = []
    ops.__spec__ = ModuleSpec("mmcv.ops", None, is_package=True)
    sys.modules["mmcv.ops"] = ops
    mmcv.ops = ops
    if not any(isinstance(f, _StandInOpsFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _StandInOpsFinder())


def child_env(**extra: str) -> dict:
    dropped = OPS_ENV_VARS + LAUNCH_ENV_VARS
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    paths = [str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(extra)
    return env


def run_cpu_child(
    code: str, cwd: Path, paths: Sequence[Path] = (), timeout: float = 120
) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter that sees no GPU, on one thread.

    ``paths`` go on its ``PYTHONPATH`` after the repository's; ``cwd`` is its
    working folder. Output is captured as text.
    """
    env = child_env(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], *map(str, paths)])
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )


def assert_child_ok(proc: subprocess.CompletedProcess) -> None:
    """The child exited 0 with ``OK`` last on its stdout; else both outputs' tails."""
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("OK"), (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}"
    )


def run_python(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def mmcv170_env(**extra: str) -> dict:
    env = child_env(**extra)
    root, *rest = env["PYTHONPATH"].split(os.pathsep)
    env["PYTHONPATH"] = os.pathsep.join([root, str(MMCV_170_DIR), *rest])
    return env


# --------------------------------------------------------------------------- data

SMALL_COCO = dict(
    images=[
        dict(id=1, file_name="land_a.jpg", width=80, height=48),
        dict(id=2, file_name="port_b.png", width=40, height=72),
        dict(id=3, file_name="land_c.png", width=64, height=36),
        dict(id=4, file_name="port_d.jpg", width=36, height=50),
        dict(id=5, file_name="sq_e.jpg", width=48, height=48),
        dict(id=6, file_name="land_f.png", width=100, height=60),
        dict(id=7, file_name="port_g.png", width=44, height=90),
        dict(id=8, file_name="land_h.jpg", width=70, height=40),
    ],
    categories=[dict(id=1, name="cat"), dict(id=2, name="dog"), dict(id=5, name="bird")],
    annotations=[
        dict(id=1, image_id=1, category_id=1, bbox=[4, 5, 30, 20], area=600, iscrowd=0),
        dict(id=2, image_id=1, category_id=5, bbox=[40, 10, 25, 30], area=750, iscrowd=0),
        dict(id=3, image_id=2, category_id=2, bbox=[2, 3, 20, 40], area=800, iscrowd=0),
        dict(id=4, image_id=3, category_id=1, bbox=[10, 4, 20, 20], area=400, iscrowd=0),
        dict(id=5, image_id=3, category_id=2, bbox=[30, 10, 20, 15], area=300, iscrowd=0),
        dict(id=6, image_id=3, category_id=5, bbox=[1, 1, 8, 8], area=64, iscrowd=0),
        dict(id=7, image_id=4, category_id=5, bbox=[5, 5, 25, 30], area=750, iscrowd=0),
        dict(id=8, image_id=5, category_id=1, bbox=[0, 0, 48, 48], area=2304, iscrowd=0),
        dict(id=9, image_id=6, category_id=2, bbox=[10, 10, 50, 30], area=1500, iscrowd=0),
        dict(id=10, image_id=6, category_id=1, bbox=[60, 5, 30, 40], area=1200, iscrowd=0),
        dict(id=11, image_id=7, category_id=5, bbox=[3, 20, 30, 50], area=1500, iscrowd=0),
        dict(id=12, image_id=8, category_id=2, bbox=[20, 8, 40, 25], area=1000, iscrowd=0),
    ],
)


def write_small_coco(root) -> Tuple[str, str, tuple]:
    ann_file, img_prefix = write_coco_files(root, SMALL_COCO)
    classes = tuple(c["name"] for c in SMALL_COCO["categories"])
    return ann_file, img_prefix, classes


IMG_NORM = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], to_rgb=True)


def mmdet_train_pipeline(flip_ratio: float = 0.5, img_scale=(96, 64)) -> list:
    return [
        dict(type="LoadImageFromFile"),
        dict(type="LoadAnnotations", with_bbox=True),
        dict(type="Resize", img_scale=img_scale, keep_ratio=True),
        dict(type="RandomFlip", flip_ratio=flip_ratio),
        dict(type="Normalize", **IMG_NORM),
        dict(type="Pad", size_divisor=32),
        dict(type="DefaultFormatBundle"),
        dict(type="Collect", keys=["img", "gt_bboxes", "gt_labels"]),
    ]
