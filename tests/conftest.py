"""Suite-wide hooks: tests marked ``cuda`` skip on a machine without a CUDA device.

``pytest -m cuda`` then runs exactly the checks that need a GPU.
"""

from __future__ import annotations

from typing import List

import pytest
import torch


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)
