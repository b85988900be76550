"""The package's architecture, checked on its import graph (read with ``ast``, nothing run).

* Dependencies run one way: utils <- registry, config, dist <- the parallel core <-
  the wrappers <- data, models <- runner; ``compat`` adapts the core and wrappers to mmcv.
* No import cycle between modules, function-local imports included.
* No module imports an underscore name from another module, or an underscore module of
  a package it is not in.
* Modules named in strings (imported by name, at run time) are named only in
  ``mmpar/registry/root.py``, where the root registries declare the packages that
  fill them; each such package is one that may import the registry, so the lazy
  import only loads what registers into it (it is no edge of the graphs below).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1] / "mmpar"

CORE = {
    "_scatter_plan",
    "_structures",
    "batch_buffer",
    "batch_layout",
    "collate",
    "data_container",
    "device_norm",
    "devices",
    "pinning",
    "pixel_norm",
    "scatter_gather",
    "gather",
    "stacking",
    "transfer",
    "packing",
    "type_handlers",
}
WRAPPERS = {"data_parallel", "distributed", "module_wrappers", "parallel_apply"}

#: What each part may import, besides itself. A part is a package of mmpar, or a
#: flat module of the core or the wrappers.
ALLOWED: Dict[str, Set[str]] = {
    "utils": set(),
    "version": set(),
    "registry": {"utils"},
    "config": {"utils"},
    "dist": {"utils"},
    "core": {"utils"},
    "wrappers": {"core", "registry", "utils"},
    "data": {"core", "dist", "registry", "utils"},
    "models": {"core", "dist", "registry", "utils"},
    "evaluation": {"utils"},
    "compat": {"core", "dist", "wrappers", "registry", "utils"},
    "runner": {
        "config",
        "core",
        "data",
        "version",
        "dist",
        "evaluation",
        "models",
        "registry",
        "utils",
        "wrappers",
    },
}


def _modules() -> Dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = ["mmpar", *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(path: Path) -> Iterator[Tuple[str, List[str], int]]:
    """(module imported, names taken from it, line) for every mmpar import in ``path``."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mmpar"):
            yield node.module, [a.name for a in node.names], node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("mmpar"):
                    yield alias.name, [], node.lineno


def _targets(module: str, names: List[str]) -> List[str]:
    """The modules an import loads: ``from mmpar.x import y`` loads ``mmpar.x.y`` if a module."""
    subs = [f"{module}.{n}" for n in names if f"{module}.{n}" in MODULES]
    return subs or [module]


def _part(module: str) -> str:
    if module == "mmpar":
        return "mmpar"
    top = module.split(".")[1]
    if top in CORE:
        return "core"
    if top in WRAPPERS:
        return "wrappers"
    return top


def _package(module: str) -> str:
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def _named_modules(path: Path) -> Iterator[Tuple[str, int]]:
    """(module, line) for each str constant of ``path`` that is an mmpar submodule's name."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if "." in node.value and node.value in MODULES:
                yield node.value, node.lineno


def _graph() -> Dict[str, Set[str]]:
    graph: Dict[str, Set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        for imported, names, _ in _imports(path):
            graph[module].update(t for t in _targets(imported, names) if t != module)
    return graph


def test_every_part_is_known() -> None:
    unknown = sorted({_part(m) for m in MODULES} - set(ALLOWED) - {"mmpar"})
    assert not unknown, f"add these parts of mmpar to ALLOWED: {unknown}"


def test_dependencies_run_one_way() -> None:
    wrong = []
    for module, targets in _graph().items():
        part = _part(module)
        if part == "mmpar":
            continue
        for target in targets:
            other = _part(target)
            if other != part and other not in ALLOWED[part]:
                wrong.append(f"{module} ({part}) imports {target} ({other})")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles() -> None:
    graph = _graph()
    state: Dict[str, int] = {}
    cycles: List[str] = []

    def visit(module: str, stack: List[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycles.append(" -> ".join(stack[stack.index(target) :] + [target]))
            elif target not in state:
                visit(target, stack + [target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "\n".join(cycles)


def test_no_private_imports_across_modules() -> None:
    wrong = []
    for module, path in MODULES.items():
        for imported, names, line in _imports(path):
            where = f"{path.relative_to(ROOT.parent)}:{line}"
            if imported != module:
                private = [n for n in names if n.startswith("_") and n != "__version__"]
                private = [n for n in private if f"{imported}.{n}" not in MODULES]
                if private:
                    wrong.append(f"{where}: imports {private} from {imported}")
            for target in _targets(imported, names):
                leaf = target.rpartition(".")[2]
                owner = target.rpartition(".")[0]
                if leaf.startswith("_") and _package(module) != owner and target != module:
                    wrong.append(f"{where}: imports {target}, private to {owner}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _part(m) in {"core", "wrappers"}))
def test_core_and_wrappers_stay_flat(module: str) -> None:
    assert module.count(".") == 1, f"{module}: the parallel core and wrappers are flat modules"


LAZY_ROOT = "mmpar.registry.root"


def test_modules_named_in_strings_only_fill_the_root_registries() -> None:
    wrong = []
    named = []
    for module, path in MODULES.items():
        for target, line in _named_modules(path):
            where = f"{path.relative_to(ROOT.parent)}:{line}"
            if module != LAZY_ROOT:
                wrong.append(f"{where}: names {target} in a string; only {LAZY_ROOT} may")
            elif "registry" not in ALLOWED.get(_part(target), set()):
                wrong.append(
                    f"{where}: lazily imports {target} ({_part(target)}), which may not "
                    "import the registry, so it cannot be what fills it"
                )
            named.append(target)
    assert not wrong, "\n".join(wrong)
    # The registries' declared locations are what the scan found, nothing hidden elsewhere.
    from mmpar.registry.root import LOCATIONS

    assert sorted({m for mods in LOCATIONS.values() for m in mods}) == sorted(set(named))


def test_only_the_registry_and_config_import_by_name() -> None:
    """``importlib.import_module`` runs in the registry (its locations), the config
    (the user's ``custom_imports``) and compat's test of whether mmcv's compiled ops
    (``mmcv._ext``) load, nowhere else."""
    allowed = {"mmpar.registry.registry", "mmpar.config.config", "mmpar.compat.mmcv_ops"}
    wrong = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in {"import_module", "__import__"} and module not in allowed:
                    wrong.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {name}")
    assert not wrong, "\n".join(wrong)


OPS = ROOT / "compat" / "ops"


def _ops_faces() -> Set[str]:
    """The names in ``mmpar/compat/ops/__init__.py``'s ``MODULES``: mmcv's modules."""
    for node in ast.walk(ast.parse((OPS / "__init__.py").read_text())):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "MODULES":
            names = [t for t in ast.walk(node.value) if isinstance(t, ast.Tuple)]
            return {n.value for t in names for n in t.elts if isinstance(n, ast.Constant)}
    raise AssertionError("mmpar/compat/ops/__init__.py has no MODULES")


def test_ops_faces_are_flat_and_machinery_in_subpackages() -> None:
    """A flat module of ``mmpar/compat/ops`` is one of mmcv's ``mmcv.ops`` modules (or
    ``backend``, the argument checks every face shares); shared machinery lives in
    subpackages (``geometry``, ``roi``, ``suppression``, ...)."""
    faces = _ops_faces()
    flat = {p.stem for p in OPS.glob("*.py")} - {"__init__"}
    assert not flat - faces - {"backend"}, (
        f"not mmcv modules, move into a subpackage or add to MODULES: {sorted(flat - faces)}"
    )
    assert not faces - flat, f"MODULES names no flat module: {sorted(faces - flat)}"
    for sub in (p for p in OPS.iterdir() if p.is_dir() and p.name != "__pycache__"):
        assert sub.name not in faces, f"{sub.name}: a subpackage named as an mmcv module"
        assert (sub / "__init__.py").is_file(), f"{sub}: machinery packages have an __init__.py"


def test_ops_machinery_does_not_import_the_faces() -> None:
    faces = {f"mmpar.compat.ops.{name}" for name in _ops_faces()}
    wrong = []
    for module, path in MODULES.items():
        if not module.startswith("mmpar.compat.ops.") or module.count(".") < 4:
            continue
        for imported, names, line in _imports(path):
            hit = [t for t in _targets(imported, names) if t in faces]
            if hit:
                wrong.append(f"{path.relative_to(ROOT.parent)}:{line}: imports the face {hit}")
    assert not wrong, "\n".join(wrong)
