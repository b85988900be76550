"""One wrapper registry in practice: mmcv 1.x's checkpoint code sees mmpar's wrappers.

mmcv's ``is_module_wrapper`` walks ``mmcv.parallel.MODULE_WRAPPERS`` and its
children. mmpar's :data:`~mmpar.module_wrappers.MODULE_WRAPPERS` is entered as
one of those children (scope ``"mmpar"``) as soon as mmcv's registry module is
loaded, so a wrapper registered on mmpar's side is unwrapped by mmcv's
``save_checkpoint`` too. The other direction needs no link:
:func:`mmpar.is_module_wrapper` looks mmcv's registry up itself.
"""

from __future__ import annotations

from types import ModuleType

from mmpar.compat.import_hook import on_import
from mmpar.module_wrappers import MMCV_REGISTRY_MODULE, MODULE_WRAPPERS

__all__ = ["link_wrapper_registry", "watch_mmcv_registry"]

_SCOPE = "mmpar"


def link_wrapper_registry(module: ModuleType) -> None:
    """Enter mmpar's wrapper registry as a child of ``module.MODULE_WRAPPERS``
    (an mmcv 1.x ``Registry``); idempotent."""
    registry = getattr(module, "MODULE_WRAPPERS", None)
    if registry is None or registry is MODULE_WRAPPERS:
        return
    # mmcv's Registry only adopts children of its own class (an assert in
    # _add_children), so the child goes into its table directly.
    children = getattr(registry, "_children", None)
    if isinstance(children, dict) and children.get(_SCOPE) is not MODULE_WRAPPERS:
        children.setdefault(_SCOPE, MODULE_WRAPPERS)


def watch_mmcv_registry() -> None:
    """Link the registries now if mmcv's is loaded, else right when it gets loaded."""
    on_import(MMCV_REGISTRY_MODULE, link_wrapper_registry)
