"""mmpar.compat.matplotlib_styles: the seaborn style names matplotlib 3.8 dropped, restored.

Checked in a fresh interpreter (the mend changes matplotlib's style library for the
process): without the mend today's matplotlib refuses ``seaborn-whitegrid``, which
UniAD's copy of nuScenes-devkit's map_api sets at import; after ``patch_mmcv()`` it is
the ``seaborn-v0_8-whitegrid`` style.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.compat._mmcv_env import child_env, requires_mmcv

matplotlib = pytest.importorskip("matplotlib")

CHECK = """
import matplotlib
matplotlib.use("Agg")
from matplotlib import pyplot as plt, style
from mmpar.compat.matplotlib_styles import add_old_seaborn_names, mend_matplotlib_styles

new_names = sorted(n for n in style.library if n.startswith("seaborn-v0_8"))
assert "seaborn-v0_8-whitegrid" in new_names
try:
    plt.style.use("seaborn-whitegrid")
except OSError:
    before = "refused"
else:
    before = "accepted"
mend_matplotlib_styles()
plt.style.use("seaborn-whitegrid")
assert plt.rcParams["axes.grid"] is True
assert style.library["seaborn-whitegrid"] is style.library["seaborn-v0_8-whitegrid"]
assert "seaborn-whitegrid" in style.available
assert add_old_seaborn_names(style) == []  # a second time adds nothing
print(before, len(new_names))
"""


def _run(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(MPLBACKEND="Agg"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


def test_old_seaborn_style_names_are_the_v0_8_styles() -> None:
    before, count = _run(CHECK).split()
    assert int(count) >= 10
    dropped = tuple(int(p) for p in matplotlib.__version__.split(".")[:2]) >= (3, 8)
    assert before == ("refused" if dropped else "accepted")


@requires_mmcv
def test_patch_mmcv_restores_them_before_matplotlib_is_imported() -> None:
    out = _run(
        """
        from mmpar.compat import patch_mmcv
        patch_mmcv()
        from matplotlib import pyplot as plt
        plt.style.use("seaborn-whitegrid")
        print("OK")
        """
    )
    assert out.endswith("OK")
