"""Supply ``mmcv.ops`` from :mod:`mmpar.compat.ops` where mmcv's compiled ops do not load.

mmcv 1.x's ``mmcv.ops`` loads the compiled extension ``mmcv._ext`` on import;
pip installs of mmcv (without ops) and mmcv-full builds made for another torch
cannot load it, and then no mmdet 2.x / mmseg 0.x model can be imported.
:func:`supply_mmcv_ops` decides whose ops serve ``mmcv.ops`` and, for mmpar's,
puts a finder on ``sys.meta_path`` that answers every import of ``mmcv.ops`` and
``mmcv.ops.<module>`` with a module holding mmpar's objects under mmcv's names.
On the first import of ``mmcv.ops`` the ops are registered in mmcv's registries
(``DCN``, ``DCNv2``, ``SAC``, ``MMSyncBN``, ``carafe``, ...) as mmcv's own
``mmcv/ops/__init__.py`` does.

A name that mmcv 1.x has and mmpar does not supply (``ball_query``, a 3D op) is
a :class:`MissingOpError`, an ``ImportError`` of one line that names it and
says what to do; ``from mmcv.ops import X`` passes it on unchanged. Being an
``ImportError``, it also escapes ``hasattr(mmcv.ops, X)`` and ``getattr(mmcv.ops,
X, None)``: a model that looks an op up by name (mmdet's RoI extractors) stops
there, with that line, rather than later with ``None``.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import sys
import warnings
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any, Dict, FrozenSet, Optional, Sequence, Tuple

__all__ = [
    "ENV_VAR",
    "MODES",
    "MissingOpError",
    "compiled_ops_error",
    "ops_in_use",
    "resolve_mode",
    "supply_mmcv_ops",
]

PACKAGE = "mmcv.ops"
#: mmcv-full's compiled extension, which research code also loads by itself.
EXT = "mmcv._ext"
#: The environment variable that chooses the ops; child processes inherit it.
ENV_VAR = "MMPAR_MMCV_OPS"
MODES = ("auto", "mmcv", "mmpar")
_ANNOUNCED_VAR = "MMPAR_MMCV_OPS_ANNOUNCED"

#: (registry attribute of mmcv.cnn.bricks.registry, name, class in mmcv.ops or ``module.class``),
#: as mmcv 1.x's own ``mmcv.ops`` registers them on import.
REGISTRATIONS: Tuple[Tuple[str, str, str], ...] = (
    ("CONV_LAYERS", "DCN", "DeformConv2dPack"),
    ("CONV_LAYERS", "DCNv2", "ModulatedDeformConv2dPack"),
    ("CONV_LAYERS", "SAC", "SAConv2d"),
    ("NORM_LAYERS", "MMSyncBN", "SyncBatchNorm"),
    ("UPSAMPLE_LAYERS", "carafe", "CARAFEPack"),
    ("ATTENTION", "MultiScaleDeformableAttention", "MultiScaleDeformableAttention"),
    ("PLUGIN_LAYERS", "CrissCrossAttention", "CrissCrossAttention"),
    ("CONV_LAYERS", "SparseConv2d", "SparseConv2d"),
    ("CONV_LAYERS", "SparseConv3d", "SparseConv3d"),
    ("CONV_LAYERS", "SparseConvTranspose2d", "SparseConvTranspose2d"),
    ("CONV_LAYERS", "SparseConvTranspose3d", "SparseConvTranspose3d"),
    ("CONV_LAYERS", "SparseInverseConv2d", "SparseInverseConv2d"),
    ("CONV_LAYERS", "SparseInverseConv3d", "SparseInverseConv3d"),
    ("CONV_LAYERS", "SubMConv2d", "SubMConv2d"),
    ("CONV_LAYERS", "SubMConv3d", "SubMConv3d"),
    # Registered by mmcv's sparse_conv module though not in mmcv.ops' __all__.
    ("CONV_LAYERS", "SparseConv4d", "sparse_conv.SparseConv4d"),
    ("CONV_LAYERS", "SubMConv4d", "sparse_conv.SubMConv4d"),
)

_state: Dict[str, Any] = {"in_use": None, "reason": "", "probing": False}


class MissingOpError(ImportError):
    """A name of mmcv 1.x's ``mmcv.ops`` that mmpar's ops do not supply."""


def resolve_mode(mode: Optional[str], field: str = "ops") -> str:
    """``mode``, or ``$MMPAR_MMCV_OPS``, or ``"auto"``, checked.

    Args:
        mode: One of :data:`MODES`, or ``None`` for the environment's choice.
        field: How the caller names ``mode`` in errors (``"--ops"`` for the command line).

    Returns:
        One of :data:`MODES`.

    Raises:
        ValueError: not one of :data:`MODES`, naming ``field`` or the variable.
    """
    source = field
    if mode is None:
        mode, source = os.environ.get(ENV_VAR) or "auto", ENV_VAR
    if mode not in MODES:
        raise ValueError(f"{source}: expected one of {', '.join(MODES)}, got {mode!r}")
    return mode


def compiled_ops_error() -> Optional[str]:
    """Why mmcv's compiled ops (``mmcv._ext``) do not load, or ``None`` when they do."""
    ours = sys.modules.get(EXT)
    if getattr(ours, "__mmpar_ops__", False):
        del sys.modules[EXT]  # probe mmcv's own library, not mmpar's stand-in
    _state["probing"] = True
    try:
        importlib.import_module(EXT)
    except Exception as err:  # ImportError, or OSError for a library built for another torch
        if ours is not None:
            sys.modules[EXT] = ours
        return f"{type(err).__name__}: {err}".splitlines()[0]
    finally:
        _state["probing"] = False
    return None


def ops_in_use() -> Optional[str]:
    """``"mmcv"`` or ``"mmpar"`` once :func:`supply_mmcv_ops` has decided; else ``None``."""
    return _state["in_use"]


def supply_mmcv_ops(mode: Optional[str] = None) -> str:
    """Decide whose ops serve ``mmcv.ops``, and put mmpar's in place if they are chosen.

    * ``"auto"`` (the default): mmcv's own where ``mmcv._ext`` loads, else mmpar's.
    * ``"mmcv"``: mmcv's own always (``import mmcv.ops`` fails as before where they
      do not load).
    * ``"mmpar"``: mmpar's always, also over a working mmcv-full.

    The choice is written to ``$MMPAR_MMCV_OPS`` so that child processes that patch
    (torchrun ranks under ``python -m mmpar.compat.run``, scripts that call
    :func:`~mmpar.compat.patch_mmcv`) make the same one. One line on stderr says
    which ops are in use, once per process tree, from rank 0.

    Args:
        mode: One of :data:`MODES`; ``None`` reads ``$MMPAR_MMCV_OPS``.

    Returns:
        ``"mmcv"`` or ``"mmpar"``.

    Raises:
        ValueError: an unknown mode.
    """
    mode = resolve_mode(mode)
    # No probe for "mmpar": it is the way out of an mmcv-full whose library may crash.
    error = compiled_ops_error() if mode != "mmpar" else None
    if mode == "mmcv" or (mode == "auto" and error is None):
        in_use = "mmcv"
        reason = "mmcv's compiled ops load" if error is None else f"they do not load: {error}"
        if mode == "mmcv":
            reason = f"asked for (ops='mmcv'); {reason}"
        _unmount()
    else:
        in_use = "mmpar"
        reason = "asked for (ops='mmpar')"
        if mode == "auto":
            reason = f"mmcv's compiled ops do not load: {error}"
        _mount()
    os.environ[ENV_VAR] = mode
    _state.update(in_use=in_use, reason=reason)
    _announce(in_use, reason)
    return in_use


#: Where launchers put a process's global rank (torchrun, SLURM, Open MPI).
_RANK_VARS = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK")


def _announce(in_use: str, reason: str) -> None:
    rank = next((os.environ[v] for v in _RANK_VARS if os.environ.get(v)), "0")
    if os.environ.get(_ANNOUNCED_VAR) == in_use or rank != "0":
        return
    os.environ[_ANNOUNCED_VAR] = in_use
    whose = "mmpar's (torchvision and torch)" if in_use == "mmpar" else "mmcv-full's own"
    print(f"mmpar: mmcv.ops are {whose}: {reason}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- mounting


def _mount() -> None:
    if not any(isinstance(f, _OpsFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _OpsFinder())
    loaded = sorted(n for n, m in sys.modules.items() if m is not None and _in_package(n))
    if loaded and not getattr(sys.modules.get(PACKAGE), "__mmpar_ops__", False):
        for name in loaded:
            del sys.modules[name]
        warnings.warn(
            f"mmpar: {', '.join(loaded)} had been imported before mmpar's ops were put in place; "
            "later imports get mmpar's, earlier ones keep what they took. Call patch_mmcv() "
            "before importing mmdet or mmseg, or run the script with python -m mmpar.compat.run",
            RuntimeWarning,
            stacklevel=3,
        )
    mmcv = sys.modules.get("mmcv")
    if mmcv is not None and getattr(mmcv, "ops", None) not in (None, sys.modules.get(PACKAGE)):
        delattr(mmcv, "ops")  # the next ``import mmcv.ops`` sets it again, to mmpar's


def _unmount() -> None:
    """Take mmpar's finder away again (``ops="mmcv"`` after mmpar's were chosen)."""
    finders = [f for f in sys.meta_path if isinstance(f, _OpsFinder)]
    if not finders:
        return
    for finder in finders:
        sys.meta_path.remove(finder)
    ours = sorted(n for n, m in sys.modules.items() if getattr(m, "__mmpar_ops__", False))
    for name in ours:
        del sys.modules[name]
    mmcv = sys.modules.get("mmcv")
    for attr in ("ops", EXT.rpartition(".")[2]):
        if mmcv is not None and getattr(getattr(mmcv, attr, None), "__mmpar_ops__", False):
            delattr(mmcv, attr)
    if ours:
        warnings.warn(
            "mmpar: mmcv's own ops were chosen after mmpar's had been imported as mmcv.ops; "
            "later imports get mmcv's, earlier ones keep mmpar's",
            RuntimeWarning,
            stacklevel=3,
        )


def _in_package(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


class _OpsFinder(MetaPathFinder, Loader):
    """Answers every import of ``mmcv.ops`` and ``mmcv.ops.<module>`` with mmpar's ops,
    and of ``mmcv._ext`` with mmpar's entry points (:mod:`mmpar.compat.mmcv_ext`)."""

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[ModuleSpec]:
        if fullname == EXT and not _state["probing"]:
            return ModuleSpec(fullname, self)
        if not _in_package(fullname) or fullname.count(".") > 2:
            return None
        return ModuleSpec(fullname, self, is_package=fullname == PACKAGE)

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        if spec.name == EXT:
            from mmpar.compat.mmcv_ext import ext_module

            return ext_module(_missing)
        return _package() if spec.name == PACKAGE else _submodule(spec.name)

    def exec_module(self, module: ModuleType) -> None:
        if module.__name__ == PACKAGE:
            _register(module)


def _stand_in(
    name: str,
    source: ModuleType,
    names: Sequence[str],
    known: FrozenSet[str],
    into: Optional[ModuleType] = None,
) -> ModuleType:
    module = ModuleType(name) if into is None else into
    module.__doc__ = f"mmpar's stand-in for {name} (see mmpar.compat.mmcv_ops)."
    if into is None:
        module.__spec__ = ModuleSpec(name, None)
    module.__mmpar_ops__ = True
    # Names the source builds on first access (SAConv2d needs mmcv.cnn) are looked
    # up on first access here too.
    vars(module).update({n: vars(source)[n] for n in names if n in vars(source)})
    module.__all__ = list(names)
    supplied = frozenset(names)

    def __getattr__(attr: str) -> Any:
        if attr in supplied:
            value = getattr(source, attr)
            setattr(module, attr, value)
            return value
        if attr in known:
            raise _missing(f"{name}.{attr}")
        raise AttributeError(f"module {name!r} has no attribute {attr!r}")

    module.__getattr__ = __getattr__
    return module


def _package() -> ModuleType:
    from mmpar.compat import ops
    from mmpar.compat.ops.backend import torchvision_ops

    torchvision_ops()  # without torchvision, ``import mmcv.ops`` says how to install it
    module = ModuleType(PACKAGE)
    # As in mmcv, every submodule is loaded with the package, and a function named
    # like its module (``nms``, ``roi_align``) wins the package attribute.
    for sub, source in ops.MODULES.items():
        name = f"{PACKAGE}.{sub}"
        sys.modules[name] = _stand_in(name, source, source.__all__, _mmcv_names(sub))
        setattr(module, sub, sys.modules[name])
    module = _stand_in(PACKAGE, ops, ops.__all__, _mmcv_names("__init__"), into=module)
    module.__path__ = []
    return module


def _submodule(name: str) -> ModuleType:
    """A module mmpar supplies that was taken out of ``sys.modules``, or the error."""
    from mmpar.compat import ops

    sub = name.rpartition(".")[2]
    if sub in ops.MODULES:
        source = ops.MODULES[sub]
        return _stand_in(name, source, source.__all__, _mmcv_names(sub))
    if not _mmcv_names(sub):
        raise ModuleNotFoundError(f"No module named {name!r} (mmcv has none either)", name=name)
    raise _missing(name)


def _missing(what: str) -> MissingOpError:
    if os.environ.get(ENV_VAR) == "mmpar":
        todo = f"drop --ops=mmpar / {ENV_VAR}=mmpar to use mmcv-full's own ops"
    else:
        todo = (
            "install an mmcv-full whose compiled ops load for your torch (mmpar then keeps "
            "mmcv's ops)"
        )
    return MissingOpError(
        f"{what} is not one of mmpar's ops, which serve mmcv.ops here ({_state['reason']}); "
        f"{todo}, or replace this op in the model"
    )


def _mmcv_names(module: str) -> FrozenSet[str]:
    """The public top-level names of mmcv's own ``mmcv/ops/<module>.py``, read, not run."""
    spec = importlib.util.find_spec("mmcv")
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    path = os.path.join(list(spec.submodule_search_locations)[0], "ops", f"{module}.py")
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                try:
                    names.update(ast.literal_eval(node.value))
                except ValueError:  # not a literal: its names are read from the other nodes
                    pass
        elif isinstance(node, ast.ImportFrom) and module == "__init__":
            names.update(a.asname or a.name for a in node.names)
    return frozenset(n for n in names if not n.startswith("_"))


def _register(package: ModuleType) -> None:
    from mmcv.cnn.bricks import registry

    for registry_name, name, path in REGISTRATIONS:
        sub, _, cls_name = path.rpartition(".")
        owner = getattr(package, sub) if sub else package
        cls = getattr(owner, cls_name, None) if cls_name in owner.__all__ else None
        if cls is not None:
            getattr(registry, registry_name).register_module(name=name, module=cls, force=True)
