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
with this Python's torch, without build isolation; it compiles nothing. mmdet3d 0.17.x
and 0.18.x, whose ``setup.py`` compiles 11 CUDA/C++ extensions (six of them include
``THC/THC.h``, gone since torch 1.11), get their wheel made from the sdist with
``setup()`` handed no extension (mmpar supplies those modules, see
:mod:`mmpar.compat.mmdet3d017`), and come with the mmcv, mmdet and mmseg inside their
gates (:data:`~mmpar.compat.install.catalogue.RELEASES`: mmcv 1.4.0, mmdet 2.14.0 and
mmseg 0.14.1 for 0.17.x, BEVFormer's pins; mmcv 1.5.0, mmdet 2.19.1, mmseg 0.20.2 for
0.18.x), e.g. ``--target ~/.cache/mmpar/mmcv-1.4.0 mmdet3d==0.17.1``.

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
