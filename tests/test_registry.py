"""Tests for mmpar.registry.Registry."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mmpar.registry import Registry
from mmpar.registry.registry import did_you_mean


class Conv:
    def __init__(self, channels: int = 3, bias: bool = True) -> None:
        self.channels = channels
        self.bias = bias


def make_head(num_classes: int = 80) -> dict:
    return {"num_classes": num_classes}


@pytest.fixture
def models() -> Registry:
    return Registry("model")


# --------------------------------------------------------------------------- construction


def test_properties(models: Registry) -> None:
    assert models.name == "model"
    assert models.scope is None and models.parent is None
    assert dict(models.children) == {} and dict(models.module_dict) == {}
    assert len(models) == 0


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(name=3), TypeError, ["name", "int"]),
        (dict(name=""), ValueError, ["name"]),
        (dict(name="x", parent="model", scope="s"), TypeError, ["parent", "str"]),
        (dict(name="x", scope=5), TypeError, ["scope", "int"]),
        (dict(name="x", scope="a.b"), ValueError, ["scope", "'a.b'"]),
    ],
)
def test_bad_constructor_arguments(kwargs: dict, error: type, words: list) -> None:
    with pytest.raises(error) as info:
        Registry(**kwargs)
    for word in words:
        assert word in str(info.value)


def test_child_needs_scope_and_unique_scope(models: Registry) -> None:
    with pytest.raises(ValueError, match="scope"):
        Registry("model", parent=models)
    Registry("model", parent=models, scope="mmdet")
    with pytest.raises(ValueError, match="'mmdet'"):
        Registry("model", parent=models, scope="mmdet")


def test_views_are_read_only(models: Registry) -> None:
    models.register_module(module=Conv)
    with pytest.raises(TypeError):
        models.module_dict["X"] = Conv  # type: ignore[index]
    with pytest.raises(TypeError):
        models.children["x"] = models  # type: ignore[index]


# --------------------------------------------------------------------------- registering


def test_decorator_registers_under_class_name(models: Registry) -> None:
    @models.register_module()
    class Backbone:
        pass

    assert models.get("Backbone") is Backbone
    assert "Backbone" in models and len(models) == 1


def test_decorator_with_name_and_list_of_names(models: Registry) -> None:
    @models.register_module(name="Renamed")
    class A:
        pass

    @models.register_module(name=["B1", "B2"])
    def b() -> int:
        return 1

    assert models.get("Renamed") is A and "A" not in models
    assert models.get("B1") is b and models.get("B2") is b
    assert sorted(models.module_dict) == ["B1", "B2", "Renamed"]


def test_call_form_returns_module(models: Registry) -> None:
    assert models.register_module(module=Conv) is Conv
    assert models.register_module(name="head", module=make_head) is make_head
    assert models.get("Conv") is Conv and models.get("head") is make_head


def test_duplicate_raises_unless_forced(models: Registry) -> None:
    models.register_module(module=Conv)

    class Other:
        pass

    with pytest.raises(KeyError, match="'Conv' is already registered in registry 'model'"):
        models.register_module(name="Conv", module=Other)
    assert models.get("Conv") is Conv
    models.register_module(name="Conv", module=Other, force=True)
    assert models.get("Conv") is Other


def test_duplicate_in_name_list_registers_nothing(models: Registry) -> None:
    models.register_module(name="B", module=Conv)
    with pytest.raises(KeyError, match="'B'"):
        models.register_module(name=["A", "B"], module=make_head)
    assert "A" not in models


@pytest.mark.parametrize(
    "kwargs, error, word",
    [
        (dict(name=3, module=Conv), TypeError, "name"),
        (dict(name=["a", 3], module=Conv), TypeError, "name"),
        (dict(name="a.b", module=Conv), ValueError, "'a.b'"),
        (dict(name="", module=Conv), ValueError, "name"),
        (dict(module=42), TypeError, "module"),
        (dict(module=Conv, force="yes"), TypeError, "force"),
    ],
)
def test_bad_register_arguments(models: Registry, kwargs: dict, error: type, word: str) -> None:
    with pytest.raises(error, match=word):
        models.register_module(**kwargs)
    assert len(models) == 0


def test_decorator_rejects_non_callable(models: Registry) -> None:
    with pytest.raises(TypeError, match="module"):
        models.register_module()(5)


# --------------------------------------------------------------------------- lookup and scopes


def test_get_missing_lists_registered_names(models: Registry) -> None:
    models.register_module(module=Conv)
    models.register_module(name="head", module=make_head)
    with pytest.raises(KeyError) as info:
        models.get("Missing")
    message = str(info.value)
    assert "'Missing'" in message and "'model'" in message
    assert "['Conv', 'head']" in message


def test_get_rejects_non_str(models: Registry) -> None:
    with pytest.raises(TypeError, match="key"):
        models.get(Conv)  # type: ignore[arg-type]
    assert Conv not in models


def test_child_registers_with_parent_and_falls_back(models: Registry) -> None:
    models.register_module(module=Conv)
    det = Registry("model", parent=models, scope="mmdet")
    det.register_module(module=make_head)
    assert models.children["mmdet"] is det and det.parent is models and det.scope == "mmdet"
    assert det.get("Conv") is Conv and "Conv" in det
    assert "make_head" not in models
    assert models.get("mmdet.make_head") is make_head
    assert det.get("mmdet.make_head") is make_head
    assert len(det) == 1


def test_child_shadows_parent(models: Registry) -> None:
    models.register_module(module=Conv)

    class LocalConv:
        pass

    det = Registry("model", parent=models, scope="mmdet")
    det.register_module(name="Conv", module=LocalConv)
    assert det.get("Conv") is LocalConv and models.get("Conv") is Conv


def test_scoped_lookup_between_siblings_and_grandchildren(models: Registry) -> None:
    det = Registry("model", parent=models, scope="mmdet")
    seg = Registry("model", parent=models, scope="mmseg")
    deep = Registry("model", parent=det, scope="deep")
    seg.register_module(module=make_head)
    deep.register_module(module=Conv)
    assert det.get("mmseg.make_head") is make_head
    assert models.get("deep.Conv") is Conv
    assert "mmseg.make_head" in deep
    with pytest.raises(KeyError, match="no registry with scope 'nowhere'"):
        models.get("nowhere.Conv")
    with pytest.raises(KeyError, match="registry 'model' \\(scope 'mmseg'\\)"):
        models.get("mmseg.Conv")


def test_all_modules_covers_descendants_once(models: Registry) -> None:
    det = Registry("model", parent=models, scope="mmdet")
    deep = Registry("model", parent=det, scope="deep")
    models.register_module(module=Conv)
    det.register_module(name=["h1", "h2"], module=make_head)
    deep.register_module(name="again", module=Conv)

    class Last:
        pass

    deep.register_module(module=Last)
    assert list(models.all_modules()) == [Conv, make_head, Last]
    assert list(det.all_modules()) == [make_head, Conv, Last]


def test_repr_lists_names(models: Registry) -> None:
    models.register_module(module=Conv)
    child = Registry("model", parent=models, scope="mmdet")
    assert repr(models) == "Registry(name='model', items=['Conv'])"
    assert repr(child) == "Registry(name='model', scope='mmdet', items=[])"


# --------------------------------------------------------------------------- build


def test_build_by_name_with_default_args(models: Registry) -> None:
    models.register_module(module=Conv)
    cfg = {"type": "Conv", "channels": 8}
    conv = models.build(cfg, channels=1, bias=False)
    assert isinstance(conv, Conv) and conv.channels == 8 and conv.bias is False
    assert cfg == {"type": "Conv", "channels": 8}


def test_build_with_class_and_type_from_default_args(models: Registry) -> None:
    assert models.build({"type": make_head, "num_classes": 3}) == {"num_classes": 3}
    models.register_module(module=make_head)
    assert models.build({}, type="make_head") == {"num_classes": 80}


def test_build_through_child_scope(models: Registry) -> None:
    det = Registry("model", parent=models, scope="mmdet")
    det.register_module(module=Conv)
    assert isinstance(models.build({"type": "mmdet.Conv"}), Conv)


def test_build_errors(models: Registry) -> None:
    models.register_module(module=Conv)
    with pytest.raises(TypeError, match="cfg must be a mapping"):
        models.build(["Conv"])  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="'type'") as info:
        models.build({"channels": 3})
    assert "channels" in str(info.value)
    with pytest.raises(KeyError, match="registered: \\['Conv'\\]"):
        models.build({"type": "Nope"})
    with pytest.raises(TypeError, match="cfg\\['type'\\]"):
        models.build({"type": 3})


def test_build_reraises_constructor_error_with_prefix(models: Registry) -> None:
    @models.register_module()
    class Picky:
        def __init__(self, size: int) -> None:
            if size < 0:
                raise ValueError(f"size must be >= 0, got {size}")

    with pytest.raises(ValueError, match="^model.Picky: size must be >= 0, got -1$") as info:
        models.build({"type": "Picky", "size": -1})
    assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(TypeError, match="model.Picky: .*unexpected keyword argument 'colour'"):
        models.build({"type": "Picky", "size": 1, "colour": "red"})


def test_build_keeps_exceptions_with_custom_constructors(models: Registry) -> None:
    class Odd(Exception):
        def __init__(self, a: int, b: int) -> None:
            super().__init__(a, b)

    def boom() -> None:
        raise Odd(1, 2)

    models.register_module(module=boom)
    with pytest.raises(Odd) as info:
        models.build({"type": "boom"})
    assert info.value.args == (1, 2)


@given(
    st.lists(
        st.text(alphabet="abcdefgXYZ_0123", min_size=1, max_size=8),
        min_size=1,
        max_size=12,
        unique=True,
    )
)
def test_every_registered_name_is_found(names: list) -> None:
    reg = Registry("prop")
    objects = {}
    for name in names:
        obj = type(f"C_{len(objects)}", (), {})
        reg.register_module(name=name, module=obj)
        objects[name] = obj
    assert len(reg) == len(names)
    for name, obj in objects.items():
        assert reg.get(name) is obj and name in reg
    assert sorted(reg.module_dict) == sorted(names)


# --------------------------------------------------------------------------- did you mean


def test_a_miss_names_the_closest_names_ignoring_case(models: Registry) -> None:
    for name in ("Adam", "AdamW", "SGD"):
        models.register_module(name=name, module=Conv)
    with pytest.raises(KeyError, match="did you mean 'AdamW'") as info:
        models.get("Adamw")
    assert "registered: ['Adam', 'AdamW', 'SGD']" in str(info.value)
    with pytest.raises(KeyError) as info:
        models.get("Completely")
    assert "did you mean" not in str(info.value)


def test_did_you_mean() -> None:
    assert did_you_mean("TinyDett", ["TinyDet", "Other"]) == "did you mean 'TinyDet'? "
    assert did_you_mean("zzz", ["TinyDet"]) == ""


# --------------------------------------------------------------------------- lazy locations


@pytest.fixture
def lazy_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A holder module with ``THINGS = Registry("thing", locations=[filler])`` and the
    filler module that registers ``Widget`` into it, both importable; yields the holder's name."""
    suffix = tmp_path.name.replace("-", "_")
    holder, filler = f"lazy_holder_{suffix}", f"lazy_filler_{suffix}"
    (tmp_path / f"{holder}.py").write_text(
        "from mmpar.registry import Registry\n"
        f"THINGS = Registry('thing', locations=[{filler!r}])\n"
        "THINGS.register_module(name='Direct', module=dict)\n"
    )
    (tmp_path / f"{filler}.py").write_text(
        f"from {holder} import THINGS\n\n@THINGS.register_module()\nclass Widget:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield holder
    for name in (holder, filler):
        sys.modules.pop(name, None)


def test_a_miss_imports_the_locations_once(lazy_modules: str) -> None:
    things = importlib.import_module(lazy_modules).THINGS
    filler = things.locations[0]
    assert things.get("Direct") is dict and filler not in sys.modules  # a hit imports nothing
    assert things.get("Widget").__module__ == filler
    with pytest.raises(KeyError, match="did you mean 'Widget'"):
        things.get("Widgett")
    assert "Widget" in things and len(things) == 2


@pytest.mark.parametrize(
    "listing", [len, repr, lambda r: dict(r.module_dict), lambda r: [*r.all_modules()]]
)
def test_listing_a_registry_imports_its_locations(lazy_modules: str, listing: Any) -> None:
    things = importlib.import_module(lazy_modules).THINGS
    listing(things)
    assert "Widget" in things.module_dict and things.locations[0] in sys.modules


def test_a_child_miss_imports_the_parents_locations(lazy_modules: str) -> None:
    things = importlib.import_module(lazy_modules).THINGS
    child = Registry("thing", parent=things, scope="mine")
    assert child.get("Widget").__name__ == "Widget"


def test_a_missing_location_is_an_import_error() -> None:
    reg = Registry("thing", locations=["no_such_module_for_mmpar_tests"])
    with pytest.raises(ImportError, match="no_such_module_for_mmpar_tests"):
        reg.get("X")


@pytest.mark.parametrize("locations", ["mmpar.models", [3], [""]])
def test_bad_locations(locations: Any) -> None:
    with pytest.raises(TypeError, match="locations must be a list of module names"):
        Registry("thing", locations=locations)


def test_the_root_registries_come_populated_without_importing_everything() -> None:
    code = (
        "import sys\n"
        "from mmpar import DATASETS, MODELS, OPTIMIZERS, TRANSFORMS\n"
        "assert 'mmpar.models' not in sys.modules, 'imported eagerly'\n"
        "model = MODELS.build(dict(type='TinyDet', num_classes=3))\n"
        "assert type(model).__name__ == 'TinyDet'\n"
        "assert 'SyntheticShapes' in DATASETS and 'Resize' in TRANSFORMS\n"
        "assert 'AdamW' in OPTIMIZERS\n"
        "print('ok')\n"
    )
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, PYTHONPATH=str(root)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
