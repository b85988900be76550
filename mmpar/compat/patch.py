"""patch_mmcv: make ``mmcv.parallel`` resolve to mmpar for every later import."""

from __future__ import annotations

import os
import sys
import warnings
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any, Dict, List, Optional, Tuple

from mmpar.compat.cpu_dist import enable_cpu_dist
from mmpar.compat.cuda_on_cpu import mend_cuda_on_cpu
from mmpar.compat.kitti_rotate_iou import mend_kitti_rotate_iou
from mmpar.compat.matplotlib_styles import mend_matplotlib_styles
from mmpar.compat.mmcv_ops import resolve_mode, supply_mmcv_ops
from mmpar.compat.mmcv_parallel import PACKAGE, PUBLIC, contents
from mmpar.compat.mmdet3d017 import mend_mmdet3d017
from mmpar.compat.mmdet3d_fixes import mend_mmdet3d
from mmpar.compat.numpy_aliases import restore_numpy_aliases
from mmpar.compat.nuscenes_configs import mend_nuscenes_configs
from mmpar.compat.opencv_scalars import mend_opencv_scalars
from mmpar.compat.shapely_multipart import mend_shapely_multipart
from mmpar.compat.shapely_strtree import mend_shapely_strtree
from mmpar.compat.wrappers_link import link_wrapper_registry
from mmpar.data_container import container_classes
from mmpar.module_wrappers import MMCV_REGISTRY_MODULE

__all__ = ["patch_mmcv", "is_patched"]

_MARK = "__mmpar_patched__"


def patch_mmcv(ops: Optional[str] = None) -> None:
    """Make ``mmcv.parallel`` resolve to mmpar, and supply ``mmcv.ops`` where mmcv's do not load.

    Call it once at the top of a training script, before ``mmcv.runner``,
    mmdet or mmseg are imported. From then on every import of ``mmcv.parallel``,
    ``mmcv.parallel.data_container``, ``.collate``, ``.scatter_gather``,
    ``.data_parallel``, ``.distributed``, ``.registry`` or ``.utils`` (mmcv's own
    relative imports included) gives mmpar's ``DataContainer``, ``collate``,
    ``scatter``, ``scatter_kwargs``, ``MMDataParallel``,
    ``MMDistributedDataParallel`` and ``is_module_wrapper``, so an unmodified
    mmdet 2.x / mmseg 0.x codebase runs on mmpar. ``MODULE_WRAPPERS`` stays an
    mmcv ``Registry`` (child registries made with mmcv's
    ``Registry(parent=...)`` keep working) that mmpar's ``is_module_wrapper``
    reads, and whose children include mmpar's own registry. Calling it again
    does nothing.

    Called after ``mmcv.parallel`` was imported, it still patches what it can:
    the modules, and every module-level name bound to one of mmcv's replaced
    objects; it warns and names what still holds mmcv's objects (copies in
    dicts, subclasses of mmcv's classes).

    ``mmcv.ops``: where mmcv's compiled ops (``mmcv._ext``) do not load -- mmcv
    installed without them, or an mmcv-full built for another torch -- every
    import of ``mmcv.ops`` and ``mmcv.ops.<module>`` gets mmpar's ops
    (:mod:`mmpar.compat.ops`, on torchvision and torch), registered in mmcv's
    registries as mmcv's are. Where they load, they stay, unless ``ops="mmpar"``.
    One line on stderr says which ops are in use (see
    :func:`mmpar.compat.mmcv_ops.supply_mmcv_ops`).

    numpy: the names numpy 1.24 and 2.0 removed (``np.int``, ``np.bool8``,
    ``np.sctypes``, ...), which the codebases of mmcv 1.x's era and their
    dependencies still read, are put back where numpy lacks them (see
    :mod:`mmpar.compat.numpy_aliases`); numpy's own names are never changed.
    OpenCV 5 refuses numpy numbers as colours and fill values, which those
    codebases pass (mmocr's DRRG and TextSnake targets): its drawing and border
    functions take them as the Python numbers they hold (see
    :mod:`mmpar.compat.opencv_scalars`). matplotlib's seaborn style names of before
    3.6, which nuScenes-devkit's map code of that era sets at import, name the
    ``seaborn-v0_8-`` styles (see :mod:`mmpar.compat.matplotlib_styles`), and shapely
    2's multi-part geometries iterate over their parts as shapely 1.x's did (see
    :mod:`mmpar.compat.shapely_multipart`); the vector-map evaluation of MapTR and
    VAD gets geometries from ``STRtree.query``, as from shapely 1.x's (see
    :mod:`mmpar.compat.shapely_strtree`). nuScenes-devkit's evaluation configs
    keep their class names in a list, which spawned DataLoader workers can pickle
    (see :mod:`mmpar.compat.nuscenes_configs`). mmdet3d 1.0 builds its sparse
    convolutions from ``mmcv.ops`` where mmpar's serve, not from spconv 2, which
    runs on CUDA only (see :mod:`mmpar.compat.mmdet3d_fixes`); where ``numba.cuda``
    finds no device, its KITTI evaluation gets its rotated IoU from mmpar (see
    :mod:`mmpar.compat.kitti_rotate_iou`). mmdet3d 0.17.x and
    0.18.x get their 11 compiled extension modules from mmpar's 3D ops, and their
    sparse convolutions registered over mmcv's (see :mod:`mmpar.compat.mmdet3d017`).
    On a process without a GPU, the research plugins' ``GridMask`` keeps the mask it
    moves with ``.cuda()`` on the CPU (see :mod:`mmpar.compat.cuda_on_cpu`).

    Processes started with ``spawn`` or ``forkserver`` (spawned DataLoader
    workers, ``mp.spawn``) re-run the main script's top level, so the patch
    line at its top runs there too; forked processes inherit it.

    Args:
        ops: Whose ``mmcv.ops``: ``"auto"`` (mmcv's where they load, else mmpar's),
            ``"mmcv"`` or ``"mmpar"``; ``None`` reads ``$MMPAR_MMCV_OPS``, default
            ``"auto"``. Child processes inherit the choice.

    Raises:
        ImportError: mmcv is not installed, or it is not mmcv 1.x (mmcv 2.x has
            no ``mmcv.parallel``).
        ValueError: an unknown ``ops``.
    """
    mode = resolve_mode(ops)
    mmcv = _import_mmcv1()
    restore_numpy_aliases()
    mend_opencv_scalars()
    mend_matplotlib_styles()
    mend_shapely_multipart()
    mend_shapely_strtree()
    mend_nuscenes_configs()
    supply_mmcv_ops(mode)
    mend_mmdet3d()
    mend_kitti_rotate_iou()
    mend_mmdet3d017()
    enable_cpu_dist()
    mend_cuda_on_cpu()
    current = sys.modules.get(PACKAGE)
    if is_patched():
        mmcv.parallel = current
        return
    old = {name: m for name, m in sys.modules.items() if m is not None and _in_package(name)}
    container_classes()  # remember mmcv's DataContainer class, if loaded, before it is replaced
    package = _install(mmcv, _wrapper_registry(old.get(MMCV_REGISTRY_MODULE)), old)
    if old:
        _report_late(old, package)


def is_patched() -> bool:
    """Whether :func:`patch_mmcv` has been applied in this process."""
    return bool(getattr(sys.modules.get(PACKAGE), _MARK, False))


def _in_package(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


def _import_mmcv1() -> ModuleType:
    try:
        import mmcv
    except ImportError as err:
        raise ImportError(
            "patch_mmcv: mmcv 1.x is not installed (mmcv could not be imported); install mmcv<2, "
            "or change the imports from mmcv.parallel to mmpar instead"
        ) from err
    version = str(getattr(mmcv, "__version__", "unknown"))
    if not version.startswith("1."):
        raise ImportError(
            f"patch_mmcv: needs mmcv 1.x, found mmcv {version}; mmcv 2.x has no mmcv.parallel "
            "(its codebases use mmengine), so there is nothing to patch"
        )
    return mmcv


def _wrapper_registry(old_registry_module: Optional[ModuleType]) -> Any:
    """mmcv's own wrapper registry if it is loaded (others may hold it), else a new one."""
    registry = getattr(old_registry_module, "MODULE_WRAPPERS", None)
    if registry is None:
        from mmcv.utils import Registry  # loaded by ``import mmcv`` already

        registry = Registry("module wrapper", scope="mmcv")
    return registry


def _new_module(name: str, path: Optional[List[str]] = None) -> ModuleType:
    module = ModuleType(name, f"mmpar's stand-in for {name} (see mmpar.compat.patch_mmcv).")
    module.__spec__ = ModuleSpec(name, None, is_package=path is not None)
    module.__package__ = name if path is not None else name.rpartition(".")[0]
    if path is not None:
        module.__path__ = list(path)
        module.__spec__.submodule_search_locations = list(path)
    return module


def _install(mmcv: ModuleType, registry: Any, old: Dict[str, ModuleType]) -> ModuleType:
    # The real folder stays the package's path: submodules mmpar does not
    # replace (_functions, distributed_deprecated) load from mmcv's files.
    package = _new_module(PACKAGE, [os.path.join(os.path.dirname(mmcv.__file__), "parallel")])
    public: Dict[str, Any] = {}
    for sub, names in contents(registry).items():
        module = _new_module(f"{PACKAGE}.{sub}")
        vars(module).update(names)
        module.__all__ = list(names)
        sys.modules[module.__name__] = module
        setattr(package, sub, module)
        public.update((k, v) for k, v in names.items() if k in PUBLIC)
    for name, module in old.items():
        sub = name[len(PACKAGE) + 1 :]
        if sub and "." not in sub and not hasattr(package, sub):
            setattr(package, sub, module)
    vars(package).update(
        public
    )  # after the submodules: the collate function shadows its module, as in mmcv
    package.__all__ = list(PUBLIC)
    setattr(package, _MARK, True)
    sys.modules[PACKAGE] = package
    # With mmcv.parallel already in sys.modules, ``import mmcv.parallel`` no longer
    # sets the package attribute: set it here.
    mmcv.parallel = package
    link_wrapper_registry(sys.modules[MMCV_REGISTRY_MODULE])
    return package


def _replaced(old: Dict[str, ModuleType], package: ModuleType) -> Dict[int, Tuple[Any, Any]]:
    """id(mmcv's object) -> (mmcv's object, mmpar's) for every replaced name."""
    pairs: Dict[int, Tuple[Any, Any]] = {}
    for name, module in old.items():
        new_module = sys.modules.get(name, package)  # the package itself is in sys.modules by now
        for attr, value in vars(module).items():
            new = getattr(new_module, attr, None)
            if (
                not attr.startswith("__")
                and new is not None
                and new is not value
                and not isinstance(value, ModuleType)
            ):
                pairs[id(value)] = (value, new)
    return pairs


def _held(pairs: Dict[int, Tuple[Any, Any]], value: Any) -> bool:
    pair = pairs.get(id(value))
    return pair is not None and pair[0] is value


def _report_late(old: Dict[str, ModuleType], package: ModuleType) -> None:
    pairs = _replaced(old, package)
    rebound: List[str] = []
    stuck: List[str] = []
    for name, module in list(sys.modules.items()):
        if module is None or _in_package(name) or module is package:
            continue
        for attr, value in list(vars(module).items()):
            if _held(pairs, value):
                setattr(module, attr, pairs[id(value)][1])
                rebound.append(f"{name}.{attr}")
            elif type(value) is dict:  # not isinstance: some module attributes warn when inspected
                stuck += [f"{name}.{attr}[{k!r}]" for k, v in value.items() if _held(pairs, v)]
    for value, _ in pairs.values():
        if isinstance(value, type):
            stuck += [
                f"{c.__module__}.{c.__qualname__} (a subclass of mmcv's {value.__name__})"
                for c in value.__subclasses__()
            ]
    message = (
        f"patch_mmcv() was called after {PACKAGE} had been imported ({', '.join(sorted(old))}). "
        f"Rebound to mmpar's objects: {', '.join(rebound) or 'none'}. "
        f"Still holding mmcv's objects: {', '.join(stuck) or 'none found'}. "
        "Call patch_mmcv() before importing mmcv.runner, mmdet or mmseg, or run the script with "
        "python -m mmpar.compat.run"
    )
    warnings.warn(message, RuntimeWarning, stacklevel=3)
