#!/usr/bin/env python3
"""Run every config of mmdet 2.x's model zoo for one training step and one test batch.

``tools/zoo.py --codebase mmdet``, under its former name: the same options and
output (see ``python tools/zoo.py --help``), mmdet's zoo only (``--codebase`` is
refused). Examples::

    python tools/mmdet_zoo.py --jobs 2 --json zoo.json
    python tools/mmdet_zoo.py --one-per-dir --jobs 2
    python tools/mmdet_zoo.py --dirs faster_rcnn,mask_rcnn --filter r50 --by-dir
    python tools/mmdet_zoo.py --from-json zoo.json --by-dir
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Optional, Sequence

_SPEC = importlib.util.spec_from_file_location("mmpar_zoo_tool", Path(__file__).with_name("zoo.py"))
tool = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(tool)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``tools/zoo.py``'s main with ``--codebase mmdet`` (see there)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a == "--codebase" or a.startswith("--codebase=") for a in argv):
        tool.zoo.cli.fail("--codebase: tools/mmdet_zoo.py runs mmdet's zoo; use tools/zoo.py")
    return tool.main(["--codebase", "mmdet", *argv], description=__doc__)


if __name__ == "__main__":
    sys.exit(main())
