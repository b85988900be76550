"""Test helper: does a structure still hold a DataContainer anywhere?"""
from __future__ import annotations

from typing import Any

from mmpar.data_container import DataContainer


def has_container(obj: Any) -> bool:
    if isinstance(obj, DataContainer):
        return True
    if isinstance(obj, dict):
        return any(has_container(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(has_container(v) for v in obj)
    return False
