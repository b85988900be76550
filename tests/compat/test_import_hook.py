"""mmpar.compat.import_hook.on_import: a callback right after a module is imported."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from types import ModuleType
from typing import Iterator, List

import pytest

from mmpar.compat.import_hook import on_import


@pytest.fixture
def module_name(tmp_path: Path) -> Iterator[str]:
    name = f"hooked_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text("VALUE = 41\nVALUE += 1\n")
    sys.path.insert(0, str(tmp_path))
    yield name
    sys.path.remove(str(tmp_path))
    sys.modules.pop(name, None)


def test_the_callback_runs_after_the_module_s_code(module_name: str) -> None:
    seen: List[int] = []
    on_import(module_name, lambda m: seen.append(m.VALUE))
    assert seen == []
    module = __import__(module_name)
    assert seen == [42] and module.VALUE == 42
    assert module.__loader__.get_source(module_name).startswith(
        "VALUE = 41"
    )  # the real loader answers


def test_a_module_already_imported_gets_the_callback_at_once(module_name: str) -> None:
    module = __import__(module_name)
    seen: List[ModuleType] = []
    on_import(module_name, seen.append)
    assert seen == [module]


def test_a_failing_callback_warns_and_the_import_still_succeeds(module_name: str) -> None:
    def broken(module: ModuleType) -> None:
        raise KeyError("boom")

    on_import(module_name, broken)
    with pytest.warns(
        RuntimeWarning, match=rf"hook on import of {module_name} failed: KeyError\('boom'\)"
    ):
        module = __import__(module_name)
    assert module.VALUE == 42


def test_other_imports_are_left_alone() -> None:
    import json.tool  # noqa: F401  (not watched: found by the ordinary finders)

    assert type(sys.modules["json.tool"].__loader__).__name__ == "SourceFileLoader"
