"""MODULE_WRAPPERS and is_module_wrapper."""

from __future__ import annotations

import uuid

import pytest
from torch import nn
from torch.nn.parallel import DataParallel, DistributedDataParallel

from mmpar.data_parallel import MMDataParallel
from mmpar.distributed import MMDistributedDataParallel
from mmpar.module_wrappers import MODULE_WRAPPERS, is_module_wrapper
from mmpar.registry import Registry


def _bare(cls: type) -> nn.Module:
    """An instance without running ``__init__`` (DDP's needs a process group)."""
    obj = cls.__new__(cls)
    nn.Module.__init__(obj)
    return obj


def test_registry_holds_the_four_wrappers() -> None:
    assert MODULE_WRAPPERS.name == "module wrapper"
    for cls in (DataParallel, DistributedDataParallel, MMDataParallel, MMDistributedDataParallel):
        assert MODULE_WRAPPERS.get(cls.__name__) is cls


def test_torch_wrappers_and_subclasses_are_wrappers() -> None:
    class MyDDP(DistributedDataParallel):
        pass

    assert is_module_wrapper(DataParallel(nn.Linear(1, 1)))
    assert is_module_wrapper(MMDataParallel(nn.Linear(1, 1), device_ids=[-1]))
    assert is_module_wrapper(_bare(DistributedDataParallel))
    assert is_module_wrapper(_bare(MMDistributedDataParallel))
    assert is_module_wrapper(_bare(MyDDP))


@pytest.mark.parametrize(
    "obj", [nn.Linear(1, 1), nn.Sequential(), None, "DataParallel", DataParallel, 3]
)
def test_other_objects_are_not_wrappers(obj: object) -> None:
    assert not is_module_wrapper(obj)


def test_registered_class_is_a_wrapper() -> None:
    class Wrapper(nn.Module):
        def __init__(self, module: nn.Module) -> None:
            super().__init__()
            self.module = module

    name = f"Wrapper_{uuid.uuid4().hex}"
    assert not is_module_wrapper(Wrapper(nn.Linear(1, 1)))
    MODULE_WRAPPERS.register_module(name=name, module=Wrapper)
    assert is_module_wrapper(Wrapper(nn.Linear(1, 1)))


def test_class_in_a_child_registry_is_a_wrapper() -> None:
    child = Registry("child wrappers", parent=MODULE_WRAPPERS, scope=f"child_{uuid.uuid4().hex}")

    @child.register_module()
    class ChildWrapper(nn.Module):
        pass

    grandchild = Registry("grandchild wrappers", parent=child, scope=f"grand_{uuid.uuid4().hex}")

    @grandchild.register_module()
    class GrandchildWrapper(nn.Module):
        pass

    assert is_module_wrapper(ChildWrapper())
    assert is_module_wrapper(GrandchildWrapper())


def test_registered_function_does_not_break_the_check() -> None:
    MODULE_WRAPPERS.register_module(name=f"fn_{uuid.uuid4().hex}", module=lambda m: m)
    assert not is_module_wrapper(nn.Linear(1, 1))
    assert is_module_wrapper(_bare(DataParallel))


def test_unwrap_module_goes_through_nested_wrappers() -> None:
    from torch import nn

    from mmpar import MMDataParallel, unwrap_module

    inner = nn.Linear(1, 1)
    assert unwrap_module(MMDataParallel(MMDataParallel(inner))) is inner
    assert unwrap_module(inner) is inner and unwrap_module("not a module") == "not a module"
