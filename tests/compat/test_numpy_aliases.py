"""mmpar.compat.numpy_aliases: numpy's removed names, back for mmcv 1.x's codebases.

Checked in a child process each, so the test process keeps numpy as it is.
"""

from __future__ import annotations

import pytest

from tests.compat._mmcv_env import requires_mmcv
from tests.compat._mmcv_env import run_python as run

np = pytest.importorskip("numpy")


@pytest.mark.skipif(not np.__version__.startswith("2."), reason="needs numpy 2")
def test_removed_names_mean_what_they_meant_and_numpys_own_stay() -> None:
    out = run(
        "import numpy as np\n"
        "long_before = np.long\n"
        "from mmpar.compat.numpy_aliases import restore_numpy_aliases\n"
        "restored = restore_numpy_aliases()\n"
        "assert {'int', 'bool8', 'sctypes', 'float_', 'product'} <= set(restored)\n"
        "assert 'long' not in restored and np.long is long_before\n"
        "assert np.int is int and np.float is float and np.object is object and np.str is str\n"
        "assert 'bool' not in restored and np.bool is np.bool_  # numpy 2 has its own\n"
        "assert np.bool8 is np.bool_ and np.float_ is np.float64 and np.NaN != np.NaN\n"
        "assert np.sctypes['float'][:3] == [np.float16, np.float32, np.float64]\n"
        "assert np.product([2, 3]) == 6 and np.asfarray([1, 2]).dtype == np.float64\n"
        "assert np.asfarray([1], dtype=np.int32).dtype == np.float64\n"
        "assert np.asfarray([1], dtype=np.float32).dtype == np.float32\n"
        "assert np.zeros(2, dtype=np.int).dtype == np.dtype(int)\n"
        "assert restore_numpy_aliases() == []\n"
        "print('ok')\n"
    )
    assert out.strip() == "ok"


@requires_mmcv
def test_patch_mmcv_restores_them() -> None:
    out = run(
        "from tests.compat._mmcv_env import install_stand_ins\n"
        "install_stand_ins()\n"
        "import numpy as np\n"
        "from mmpar.compat import patch_mmcv\n"
        "patch_mmcv()\n"
        "print(np.bool8 is np.bool_, np.int is int)\n"
    )
    assert out.split()[-2:] == ["True", "True"]
