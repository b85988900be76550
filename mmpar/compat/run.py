"""Run a script with mmcv.parallel pointing at mmpar: ``python -m mmpar.compat.run SCRIPT ...``.

It behaves like ``python SCRIPT ARGS...`` after :func:`mmpar.compat.patch_mmcv`:
``sys.argv`` is ``[SCRIPT, ARGS...]``, the script's folder comes first on
``sys.path``, it runs as ``__main__`` and its exit status passes through. Under
torchrun::

    torchrun --nproc_per_node=2 -m mmpar.compat.run tools/train.py CONFIG --launcher pytorch
"""

from __future__ import annotations

import os
import runpy
import sys
from typing import List, Optional

from mmpar.compat.patch import patch_mmcv

__all__ = ["main"]

_USAGE = "usage: python -m mmpar.compat.run SCRIPT [ARGS...]"


def main(argv: Optional[List[str]] = None) -> None:
    """Patch mmcv, then run ``argv[0]`` as the main script with ``argv[1:]`` as its arguments.

    Raises:
        SystemExit: 2 without a script or with a missing one; otherwise the script's own.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(
            _USAGE + "\n\n" + (__doc__ or "").strip(), file=sys.stderr if not argv else sys.stdout
        )
        raise SystemExit(2 if not argv else 0)
    script = argv[0]
    if not os.path.isfile(script):
        print(f"{_USAGE}\nerror: script {script!r} is not a file", file=sys.stderr)
        raise SystemExit(2)
    try:
        patch_mmcv()
    except ImportError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    sys.argv = [script, *argv[1:]]
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python SCRIPT` puts it
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
