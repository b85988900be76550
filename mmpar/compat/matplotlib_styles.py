"""matplotlib's seaborn style names of before 3.6, for code that sets one at import.

matplotlib 3.6 renamed its bundled seaborn styles (``seaborn-whitegrid`` became
``seaborn-v0_8-whitegrid``) and 3.8 dropped the old names. Code of the mmcv 1.x era
still uses them, some of it at import time: nuScenes-devkit's ``map_api`` before
1.1.10, and the copy of it that UniAD's dataset imports, run
``plt.style.use('seaborn-whitegrid')`` at the top of the module, so on today's
matplotlib the plugin does not import ("'seaborn-whitegrid' is not a valid package
style").

:func:`mend_matplotlib_styles` (called by ``patch_mmcv()``) adds, on import of
``matplotlib.style``, each old name that matplotlib lacks to its style ``library`` as
the same style as its ``seaborn-v0_8-`` successor. Names matplotlib has are never
changed, and nothing is added where the old names still exist.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import List

from mmpar.compat.import_hook import on_import

__all__ = ["NEW_PREFIX", "OLD_PREFIX", "add_old_seaborn_names", "mend_matplotlib_styles"]

NEW_PREFIX = "seaborn-v0_8"
OLD_PREFIX = "seaborn"


@functools.lru_cache(maxsize=None)  # hooked once, however often patch_mmcv() runs
def mend_matplotlib_styles() -> None:
    """Add the old seaborn style names once ``matplotlib.style`` is imported."""
    on_import("matplotlib.style", add_old_seaborn_names)


def add_old_seaborn_names(style: ModuleType) -> List[str]:
    """Add to ``style.library`` (and ``style.available``) the old names it lacks.

    Args:
        style: the ``matplotlib.style`` module.

    Returns:
        The names added now, sorted; empty where matplotlib still has them.
    """
    library = style.library
    added = []
    for name in sorted(library):
        if name.startswith(NEW_PREFIX):
            old = OLD_PREFIX + name[len(NEW_PREFIX) :]
            if old not in library:
                library[old] = library[name]
                added.append(old)
    available = getattr(style, "available", None)
    if isinstance(available, list):
        available.extend(name for name in added if name not in available)
        available.sort()
    return added
