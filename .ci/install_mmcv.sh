#!/usr/bin/env bash
# Install the real mmcv 1.7.2 and mmdet 2.28.2 (pure Python, no compiled ops) into
# the test environment, for the interop tests in tests/compat/. Not a user-facing
# extra: mmpar itself never imports mmcv or mmdet.
#
# Fresh install: 13-29 s on 2 cores without a pip cache (the wheel build is ~5 s).
# Quick to re-run (~1 s): it does nothing when every package below is already installed
# at the pinned version (and `import cv2` works).
#
# Why it looks like this:
# - mmcv 1.7.2 is only an sdist on PyPI and its setup.py imports pkg_resources,
#   which setuptools >= 70-something no longer ships, while torch 2.13 needs
#   setuptools >= 77. So the wheel is built in a throwaway venv with an old
#   setuptools, MMCV_WITH_OPS=0 (no C++/CUDA ops), then installed here.
# - mmcv and mmdet are installed with --no-deps: mmcv asks for opencv-python
#   (GUI build; the headless build gives the same `import cv2`), and mmdet's
#   extras would pull in mmcv-full / torch builds. Their pure-Python runtime
#   dependencies are listed explicitly instead. pip then prints "ERROR: ... mmcv
#   1.7.2 requires opencv-python>=3, which is not installed" and exits 0: expected.
# - yapf is pinned to 0.40.1: yapf >= 0.40.2 dropped the `verify=` argument that
#   mmcv.Config.pretty_text passes to FormatCode, and yapf < 0.40 imports lib2to3,
#   which Python 3.13 removed.
# - mmcv.runner imports torchvision (model-zoo URLs only) and mmdet.datasets
#   imports mmcv.ops (compiled); neither is installed here: the tests register
#   stand-ins, see tests/compat/_mmcv_env.py.
#
# Environment: PYTHON (default python3), MMCV_BUILD_DIR (default a mktemp dir,
# removed at exit).
set -euo pipefail

PY=${PYTHON:-python3}
MMCV_VERSION=1.7.2
MMDET_VERSION=2.28.2

# Pure-Python runtime deps of mmcv (addict, yapf, pyyaml, packaging, Pillow, numpy,
# cv2) and of mmdet's data code (pycocotools, terminaltables, six, matplotlib, scipy),
# and scikit-learn, from mmdet's optional requirements: PAA's and LAD's assigners fit
# a Gaussian mixture with it (tools/mmdet_zoo.py builds and trains those models).
RUNTIME_DEPS=(
    "addict"
    "yapf==0.40.1"
    "pyyaml"
    "packaging"
    "Pillow"
    "numpy"
    "opencv-python-headless"
    "pycocotools"
    "terminaltables"
    "six"
    "matplotlib"
    "scipy"
    "scikit-learn"
)

already_installed() {
    "$PY" - "$MMCV_VERSION" "$MMDET_VERSION" <<'EOF'
import sys
from importlib import metadata

want = {"mmcv": sys.argv[1], "mmdet": sys.argv[2], "yapf": "0.40.1"}
for name, version in want.items():
    try:
        if metadata.version(name) != version:
            sys.exit(1)
    except metadata.PackageNotFoundError:
        sys.exit(1)
for name in ("addict", "yaml", "packaging", "PIL", "numpy", "cv2",
             "pycocotools.coco", "terminaltables", "six", "matplotlib", "scipy", "sklearn"):
    try:
        __import__(name)
    except Exception:
        sys.exit(1)
EOF
}

if already_installed; then
    echo "install_mmcv: mmcv $MMCV_VERSION and mmdet $MMDET_VERSION already installed"
    exit 0
fi

BUILD_DIR=${MMCV_BUILD_DIR:-}
if [[ -z "$BUILD_DIR" ]]; then
    BUILD_DIR=$(mktemp -d /tmp/mmcv-build.XXXXXX)
    trap 'rm -rf "$BUILD_DIR"' EXIT
fi

# 1. The mmcv wheel, built with an old setuptools in a venv of its own.
"$PY" -m venv "$BUILD_DIR/venv"
"$BUILD_DIR/venv/bin/python" -m pip install -q "setuptools<70" wheel
MMCV_WITH_OPS=0 "$BUILD_DIR/venv/bin/python" -m pip wheel -q --no-deps --no-build-isolation \
    "mmcv==$MMCV_VERSION" -w "$BUILD_DIR/wheels"

# 2. Runtime deps, then mmcv and mmdet without theirs.
"$PY" -m pip install -q "${RUNTIME_DEPS[@]}"
"$PY" -m pip install -q --no-deps "$BUILD_DIR/wheels/mmcv-$MMCV_VERSION-"*.whl "mmdet==$MMDET_VERSION"

already_installed || { echo "install_mmcv: installed, but the check still fails" >&2; exit 1; }
echo "install_mmcv: installed mmcv $MMCV_VERSION and mmdet $MMDET_VERSION"
