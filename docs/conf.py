"""Sphinx configuration of mmpar's documentation site.

Build it with ``pip install -e ".[docs]"`` and, from the repository root,
``python -m sphinx -W --keep-going -n -b html docs build/docs`` (``.ci/run``
builds it so: every warning, a broken cross-reference or a docstring that does not
parse, fails the build).
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mmpar.version import __version__  # noqa: E402

project = "mmpar"
author = "the mmpar authors"
copyright = "the mmpar authors; Apache-2.0"
release = __version__
version = ".".join(__version__.split(".")[:2])

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_gen", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]

# Markdown: GitHub's heading anchors, so that `page.md#heading` links work on both.
myst_heading_anchors = 6
myst_enable_extensions = ["colon_fence"]
suppress_warnings: list = []

# API reference: one page per public module (api/generated/, written at each build by
# _write_api_pages below), so that a new module appears without an edit here.
autodoc_default_options = {
    "members": True,
    "undoc-members": True,
    # Each name on the page of the module that defines it, not again where re-exported.
    "ignore-module-all": True,
    "show-inheritance": True,
    "member-order": "bysource",
}
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented_params"
autodoc_class_signature = "separated"
autodoc_mock_imports: list = []
# A method without a docstring of its own shows none (not torch's, in torch's markup).
autodoc_inherit_docstrings = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_use_ivar = True  # "Attributes:" as fields: no second entry beside the attribute's own

# Strict cross-references (-n): every reference to mmpar's own names must resolve. Other
# libraries' names (torch, numpy, the standard library) are not linked: the build runs
# offline (no intersphinx), so their references are not checked.
nitpicky = True
_EXTERNAL = (
    r"(torch|numpy|np|typing|typing_extensions|collections|multiprocessing|concurrent"
    r"|argparse|logging|pathlib|os|io|enum|types|abc|contextlib|threading|subprocess"
    r"|datetime|functools|dataclasses|weakref|socket|mmcv|mmdet|PIL|cv2|json"
    r"|importlib|queue|signal|optparse|inspect|pickle|sys|packaging|pycocotools|torchvision"
    r"|matplotlib|tensorboard)(\..*)?"
)
_BUILTINS = (
    r"(int|float|str|bytes|bool|complex|object|list|tuple|dict|set|frozenset|type|None"
    r"|Ellipsis|slice|range|callable|Callable|Any|Optional|Union|Iterable|Iterator"
    r"|Sequence|Mapping|MutableMapping|Dict|List|Tuple|Set|Type|NoReturn|Literal"
    r"|Exception|[A-Za-z]*Error|[A-Za-z]*Warning|KeyboardInterrupt|SystemExit"
    r"|Tensor|ndarray|Module|Generator|NamedTuple|TextIO|BinaryIO|IO|Hashable"
    r"|Protocol|TypeVar|Generic|ModuleType|FrameType|Path|TracebackType"
    r"|[A-Z]|[A-Z][A-Za-z]*T|T_co|K|V|F|R)"
)
nitpick_ignore_regex = [
    (r"py:.*", _EXTERNAL),
    (r"py:.*", _BUILTINS),
    # A private name (a base class, a helper) has no page: the API reference is public.
    (r"py:.*", r"(.*\.)?_[A-Za-z0-9].*"),
    # torch.autograd's ``ctx`` of a Function's forward and backward.
    (r"py:.*", r"ctx(\..*)?"),
    # Prose before a colon in a "Returns:" line or an attribute's docstring, which napoleon
    # reads as a type ("The states a box can be in: ..."): never a name to link.
    (r"py:class", r".*\s.*"),
]


API_DIR = Path(__file__).resolve().parent / "api" / "generated"


def public_modules(package: Path = ROOT / "mmpar") -> list:
    """Dotted names of mmpar's public modules and packages, from the files (no import).

    A module or package whose name starts with ``_`` (``_structures``, ``__main__``) is
    private, and so is everything below a private package.
    """
    names = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if len(parts) < 2 or any(part.startswith("_") for part in parts):
            continue  # the root's page is api/index
        names.append(".".join(parts))
    return names


def _page(name: str, children: list) -> str:
    title = f"``{name}``"
    lines = [title, "=" * len(title), "", f".. automodule:: {name}", ""]
    if children:
        lines += [".. toctree::", "   :maxdepth: 1", ""]
        lines += [f"   {child}" for child in children]
        lines.append("")
    return "\n".join(lines)


def _write_api_pages() -> None:
    """One page per public module; a package's page lists its submodules' pages.

    A top-level module's page that no page of api/ lists is a build warning ("document
    isn't included in any toctree"): a new module must be placed in a group by hand.
    """
    names = public_modules()
    API_DIR.mkdir(parents=True, exist_ok=True)
    wanted = set()
    for name in names:
        children = [n for n in names if n.rpartition(".")[0] == name]
        text = _page(name, children)
        page = API_DIR / f"{name}.rst"
        wanted.add(page.name)
        if not page.exists() or page.read_text(encoding="utf-8") != text:
            page.write_text(text, encoding="utf-8")  # unchanged pages keep their time
    for page in API_DIR.glob("*.rst"):
        if page.name not in wanted:
            page.unlink()


_write_api_pages()

# The repository's own pages (README.md, CONTRIBUTING.md, CHANGELOG.md) on the site: copies
# in _gen/ with their links rewritten from the repository root to docs/, which index.md,
# contributing.md and changelog.md include.
GEN_DIR = Path(__file__).resolve().parent / "_gen"
ROOT_PAGES = {
    "README.md": "index.md",
    "CONTRIBUTING.md": "contributing.md",
    "CHANGELOG.md": "changelog.md",
}
_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def _docs_link(target: str) -> str:
    """A link of a root page, as docs/ sees it."""
    if re.match(r"^([a-z]+:|#)", target):
        return target
    path, sep, anchor = target.partition("#")
    if path.startswith("docs/"):
        path = path[len("docs/") :]
    elif path in ROOT_PAGES:
        path = ROOT_PAGES[path]
    else:
        path = "../" + path
    return path + sep + anchor


def _write_root_pages() -> None:
    GEN_DIR.mkdir(exist_ok=True)
    for name in ROOT_PAGES:
        text = (ROOT / name).read_text(encoding="utf-8")
        text = _LINK.sub(lambda m: f"]({_docs_link(m.group('target'))})", text)
        page = GEN_DIR / name
        if not page.exists() or page.read_text(encoding="utf-8") != text:
            page.write_text(text, encoding="utf-8")


_write_root_pages()


def _lookup(path: str) -> object:
    """The object a dotted ``path`` names (a module, then attributes); KeyError if none."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:  # a path that is not a module (or that fails to import)
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            raise KeyError(path) from None
        return obj
    raise KeyError(path)


_ROLE_KINDS = {
    "func": ("function", "method", "classmethod", "staticmethod"),
    "meth": ("method", "classmethod", "staticmethod", "function"),
    "class": ("class", "exception"),
    "exc": ("exception", "class"),
    "mod": ("module",),
    "attr": ("attribute", "property", "data"),
    "data": ("data", "attribute"),
    "obj": ("function", "method", "class", "exception", "module", "attribute", "data"),
}


def _resolve_reexport(app, env, node, contnode):
    """Resolve a reference that names a documented object by another path.

    * ``mmpar.compat.patch_mmcv`` (a re-export), or ``DataContainer`` written in a module that
      imports it: the object is documented once, under the module that defines it
      (``mmpar.compat.patch.patch_mmcv``); the reference resolves there when that entry is
      the very object it names.
    * A short name (``scatter``, ``roi_align_rotated``) that exactly one entry of the
      reference's kind ends with.
    * A public object without an entry of its own (a method that a class inherits from a
      private base): the entry of the class that holds it.

    Anything else still fails the build.
    """
    if node.get("refdomain") != "py":
        return None
    domain = env.get_domain("py")
    target = node["reftarget"]
    module, cls = node.get("py:module"), node.get("py:class")
    candidates = [target]
    if module:
        candidates.append(f"{module}.{target}")
        if cls:
            candidates.append(f"{module}.{cls}.{target}")
    by_name: dict = {}
    for fullname in domain.objects:
        by_name.setdefault(fullname.rsplit(".", 1)[-1], []).append(fullname)
    last = target.rsplit(".", 1)[-1]

    def resolve(fullname: str):
        return domain.resolve_xref(
            env, node["refdoc"], app.builder, "obj", fullname, node, contnode
        )

    found = {}
    for candidate in candidates:
        try:
            found[candidate] = _lookup(candidate)
        except KeyError:
            continue
        for fullname in by_name.get(last, []):
            try:
                if _lookup(fullname) is found[candidate]:
                    return resolve(fullname)
            except KeyError:
                continue
    kinds = _ROLE_KINDS.get(node.get("reftype"), ())
    ends = [
        f
        for f in by_name.get(last, [])
        if f.endswith("." + target) and domain.objects[f].objtype in kinds
    ]
    if len(ends) == 1:
        return resolve(ends[0])
    for candidate in found:
        parent = candidate.rpartition(".")[0]
        if parent in domain.objects:
            return resolve(parent)
    return None


def setup(app):
    app.connect("missing-reference", _resolve_reexport)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


html_theme = "furo"
html_title = f"mmpar {release}"
html_static_path: list = []
