"""The argument checks that recur across mmpar, written once.

``bool`` is a subclass of ``int`` in Python, so ``True`` would pass a plain
``isinstance(x, int)``; every check here refuses it.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

__all__ = ["check_positive_int", "is_int", "is_number"]


def is_int(value: Any) -> bool:
    """Whether ``value`` is an integer (Python or numpy), and not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_number(value: Any) -> bool:
    """Whether ``value`` is a real number (int or float, Python or numpy), and not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def check_positive_int(value: Any, name: str, owner: str) -> int:
    """``value`` as an ``int``, checked to be an integer ``>= 1``.

    Args:
        value: The argument to check.
        name: The argument's name, for the message (e.g. ``"samples_per_gpu"``).
        owner: What takes the argument, for the message (e.g. ``"GroupSampler"``).

    Raises:
        TypeError: ``value`` is not an integer (a bool is not one).
        ValueError: ``value`` is below 1.
    """
    if not is_int(value):
        raise TypeError(f"{owner}: {name} must be an int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{owner}: {name} must be >= 1, got {value}")
    return int(value)
