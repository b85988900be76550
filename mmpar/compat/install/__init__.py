"""One command that installs mmcv 1.x without its compiled ops, and the codebases named.

::

    python -m mmpar.compat.install [--mmcv VERSION] [CODEBASE[==VERSION] ...]
                                   [--target DIR] [--dry-run]

mmcv 1.x is an sdist whose ``setup.py`` needs ``setuptools<70``: its wheel is built
without compiled ops (``MMCV_WITH_OPS=0``) in a throwaway venv and kept under
``~/.cache/mmpar/wheels``, so later runs skip the build. mmcv and each codebase
(its last mmcv-1.x release unless ``NAME==VERSION``; the codebases it imports come
with it) are installed with ``--no-deps``; their own runtime requirements, read from
their metadata, less mmcv, torch and torchvision and less what is installed, are
resolved by pip with the installed torch (and torchvision) pinned, and installed.
OpenCV requirements are met by any ``cv2`` already there, else by
opencv-python-headless. The few requirements installed otherwise than written, and
why, are :data:`~mmpar.compat.install.catalogue.REPLACED`,
:data:`~mmpar.compat.install.catalogue.RELAXED`,
:data:`~mmpar.compat.install.catalogue.READ_FROM_WHEEL` (a requirement whose own
requirements, read from its wheel, pip resolves relaxed: nuscenes-devkit's numpy < 2)
and :data:`~mmpar.compat.install.catalogue.NOT_INSTALLED`. A codebase published as
an sdist only, whose ``setup.py`` imports torch (mmdet3d 1.0), gets its wheel made
with this Python's torch, without build isolation; it compiles nothing.

Without ``--mmcv`` it picks the newest mmcv every codebase accepts: 1.7.2, or 1.7.0
where mmpose, mmaction2 or mmdet3d is named (they refuse mmcv > 1.7.0 on import).
``--target DIR`` installs into DIR (``pip --target``), e.g. mmcv 1.7.0 beside a main
1.7.2; a process with DIR first on ``PYTHONPATH`` uses it. When everything asked for
is installed already it says so and does nothing (about as fast as importing torch).
It prints each step, then the installed versions, and checks that everything imports
after :func:`mmpar.compat.patch_mmcv`. Errors made before anything changed (an
unknown codebase, an mmcv outside 1.3.0-1.7.2 or refused by a codebase, no torch, no
pip, a failed build with pip's last lines) are one ``error:`` line, exit status 2.
"""
