"""Config: configs read from Python or JSON files, with ``_base_`` inheritance.

A Python config is a file of assignments::

    _base_ = ["../_base_/models/retinanet.py", "../_base_/schedule.py"]
    model = dict(backbone=dict(depth=101))
    optimizer = dict(_delete_=True, type="AdamW", lr=1e-4)

Its bases are read first, in order, each merged onto the previous ones, and then the
file itself is merged on top. Dicts merge key by key, recursively; anything else,
lists included, replaces what the bases had, so when two bases set the same key
the later one wins. A dict holding ``_delete_=True`` replaces the base's dict
instead of merging into it. Paths in ``_base_`` are relative to the file that names
them, and bases may have bases of their own.

Python configs are executed as Python: only load configs you trust. Their
module-level names become the config, except names starting with ``_`` (other than
``_base_``) and imported modules, functions and classes. JSON configs are data only;
they may also hold a ``_base_`` key.

``custom_imports = dict(imports=["my_project.models"], allow_failed_imports=False)``
names modules to import before anything is built from the config, as in mmcv: the
modules that register a project's own models, datasets or transforms.
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import warnings
from pathlib import Path
from types import BuiltinFunctionType, FunctionType, ModuleType
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from mmpar.config.config_dict import ConfigDict, merge_dicts, set_by_path, to_plain
from mmpar.config.formats import check_dumpable, format_python
from mmpar.utils.exceptions import with_prefix

__all__ = ["Config", "apply_custom_imports"]

PathLike = Union[str, "os.PathLike[str]"]
_EXTENSIONS = (".py", ".json")
_BASE_KEY = "_base_"
_SKIPPED_TYPES = (ModuleType, FunctionType, BuiltinFunctionType, type)


_CUSTOM_IMPORTS_KEYS = ("imports", "allow_failed_imports")


def _custom_import_names(custom_imports: Mapping[str, Any]) -> Sequence[str]:
    imports = custom_imports.get("imports", [])
    names = [imports] if isinstance(imports, str) else imports
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) and n for n in names):
        raise TypeError(
            "custom_imports.imports: expected a module name or a list of module names (str), "
            f"got {type(imports).__name__} {imports!r}"
        )
    return names


def apply_custom_imports(custom_imports: Optional[Mapping[str, Any]]) -> List[str]:
    """Import the modules a config's ``custom_imports`` names, so that they register.

    Args:
        custom_imports: ``dict(imports=[...], allow_failed_imports=False)``, or None
            (nothing to import). ``imports`` is a module name or a list of them;
            with ``allow_failed_imports=True`` a module that fails to import is
            skipped with a warning instead of raising.

    Returns:
        The names of the modules imported.

    Raises:
        TypeError: ``custom_imports`` is not a dict, ``imports`` not a list of module
            names, or ``allow_failed_imports`` not a bool.
        ValueError: a key other than ``imports`` and ``allow_failed_imports``.
        ImportError: a module failed to import (and failures are not allowed); the
            message names the module and the reason.
    """
    if custom_imports is None:
        return []
    if not isinstance(custom_imports, Mapping):
        raise TypeError(
            "custom_imports: expected a dict such as dict(imports=['my_project'], "
            f"allow_failed_imports=False), got {type(custom_imports).__name__} {custom_imports!r}"
        )
    unknown = sorted(set(custom_imports) - set(_CUSTOM_IMPORTS_KEYS))
    if unknown:
        raise ValueError(
            f"custom_imports: unknown keys {unknown}; expected among {list(_CUSTOM_IMPORTS_KEYS)}"
        )
    names = _custom_import_names(custom_imports)
    allow_failed = custom_imports.get("allow_failed_imports", False)
    if not isinstance(allow_failed, bool):
        raise TypeError(
            "custom_imports.allow_failed_imports: expected True or False, got "
            f"{type(allow_failed).__name__} {allow_failed!r}"
        )
    imported = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # the module's own code may raise anything
            reason = f"{type(exc).__name__}: {exc}"
            if not allow_failed:
                missing = isinstance(exc, ModuleNotFoundError) and name.startswith(exc.name or "?")
                hint = "is it installed, or on PYTHONPATH? " if missing else ""
                raise ImportError(
                    f"custom_imports: cannot import {name!r} ({reason}); {hint}set "
                    "custom_imports.allow_failed_imports=True to go on without it",
                    name=name,
                ) from exc
            warnings.warn(
                f"custom_imports: {name!r} failed to import ({reason}) and is skipped, "
                "as allow_failed_imports=True",
                UserWarning,
                stacklevel=2,
            )
            continue
        imported.append(name)
    return imported


def _check_extension(path: Path, what: str) -> None:
    if path.suffix not in _EXTENSIONS:
        raise ValueError(
            f"{what}: expected a .py or .json file, got {str(path)!r} (extension {path.suffix!r})"
        )


def _read_python(path: Path, text: str) -> Dict[str, Any]:
    """Execute a Python config and collect its module-level names."""
    try:
        code = compile(text, str(path), "exec")
    except SyntaxError as exc:
        raise SyntaxError(
            f"invalid Python config {path}, line {exc.lineno}: {exc.msg}",
            (str(path), exc.lineno, exc.offset, exc.text),
        ) from None
    namespace: Dict[str, Any] = {"__file__": str(path), "__name__": "__mmpar_config__"}
    try:
        exec(code, namespace)
    except Exception as exc:
        tb, line = exc.__traceback__, None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == str(path):
                line = tb.tb_lineno
            tb = tb.tb_next
        new = with_prefix(exc, f"error in Python config {path}, line {line}")
        if new is exc:
            raise
        raise new from exc
    return {
        key: value
        for key, value in namespace.items()
        if (not key.startswith("_") or key == _BASE_KEY) and not isinstance(value, _SKIPPED_TYPES)
    }


def _read_json(path: Path, text: str) -> Dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"invalid JSON config {path}, line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(
            f"JSON config {path}: expected an object at the top level, got {type(data).__name__}"
        )
    return data


def _base_paths(raw: Any, path: Path) -> List[Path]:
    """The files named by a config's ``_base_`` value, resolved against its folder."""
    if raw is None:
        return []
    names = [raw] if isinstance(raw, str) else raw
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"{path}: _base_ must be a path or a list of paths (str), got {raw!r}")
    paths = []
    for name in names:
        base = (path.parent / os.path.expanduser(name)).resolve()
        _check_extension(base, f"_base_ {name!r} in {path}")
        if not base.is_file():
            raise FileNotFoundError(
                f"base config {str(base)!r} not found (_base_ {name!r} in {path})"
            )
        paths.append(base)
    return paths


def _load(path: Path, chain: Tuple[Path, ...]) -> Tuple[ConfigDict, List[Tuple[Path, str]]]:
    """Read one config file and its bases.

    Returns:
        The merged config and the ``(path, text)`` of every file read, bases first.
    """
    if path in chain:
        raise ValueError("_base_ cycle: " + " -> ".join(str(p) for p in chain + (path,)))
    text = path.read_text(encoding="utf-8")
    raw = _read_python(path, text) if path.suffix == ".py" else _read_json(path, text)
    merged, sources = ConfigDict(), []
    for base in _base_paths(raw.pop(_BASE_KEY, None), path):
        base_cfg, base_sources = _load(base, chain + (path,))
        merged = merge_dicts(merged, base_cfg)
        sources.extend(base_sources)
    return merge_dicts(merged, raw), sources + [(path, text)]


def _as_path(path: Any, argument: str) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"{argument}: expected a str or os.PathLike path, got {type(path).__name__} {path!r}"
        )
    return Path(path)


class Config:
    """A config: a :class:`ConfigDict` plus the file it came from.

    Attribute and item access, ``in``, ``len``, iteration and dict methods such as
    ``get``/``keys``/``items`` go to the ConfigDict. Keys that clash with Config's own
    names (``filename``, ``text``, ``dump`` ...) are reachable with item access only.

    Args:
        cfg_dict: The config's content; copied (nested dicts and lists), not shared.
        filename: The file it was read from, if any.
        text: The source text of that file (and its bases).

    Raises:
        TypeError: ``cfg_dict`` is not a mapping or ``filename`` not a path.
    """

    _OWN = ("_cfg_dict", "_filename", "_text")

    def __init__(
        self,
        cfg_dict: Optional[Mapping[str, Any]] = None,
        filename: Optional[PathLike] = None,
        text: str = "",
    ) -> None:
        if cfg_dict is not None and not isinstance(cfg_dict, Mapping):
            raise TypeError(f"cfg_dict: expected a mapping or None, got {type(cfg_dict).__name__}")
        if filename is not None:
            filename = str(_as_path(filename, "filename"))
        object.__setattr__(self, "_cfg_dict", ConfigDict(to_plain(dict(cfg_dict or {}))))
        object.__setattr__(self, "_filename", filename)
        object.__setattr__(self, "_text", text)

    @classmethod
    def fromfile(cls, path: PathLike, import_custom_modules: bool = True) -> "Config":
        """Read a ``.py`` or ``.json`` config and its ``_base_`` files.

        Args:
            path: The config file.
            import_custom_modules: Import the modules its ``custom_imports`` names
                (see :func:`apply_custom_imports`).

        Returns:
            The merged config; ``.text`` is the file's text, or with bases, each file's
            text after a ``# <path>`` line, bases first.

        Raises:
            TypeError: ``path`` is not a path, or a ``_base_`` is not a path or list of paths.
            ValueError: an extension other than .py/.json, invalid JSON (with file and
                line), or a ``_base_`` cycle (listing the chain).
            FileNotFoundError: the file or a base is missing (naming the file that
                referred to it).
            SyntaxError: invalid Python, naming the file and line.
            ImportError: a module of ``custom_imports`` failed to import.
        """
        file = _as_path(path, "path")
        _check_extension(file, "path")
        if not file.is_file():
            raise FileNotFoundError(f"config file {str(file)!r} not found")
        cfg, sources = _load(file.resolve(), ())
        if len(sources) == 1:
            text = sources[0][1]
        else:
            text = "\n".join(f"# {source}\n{source_text}" for source, source_text in sources)
        if import_custom_modules:
            apply_custom_imports(cfg.get("custom_imports"))
        return cls(cfg, filename=file, text=text)

    @property
    def filename(self) -> Optional[str]:
        """The file the config was read from, or None."""
        return self._filename

    @property
    def text(self) -> str:
        """The source text (see :meth:`fromfile`), empty for configs not read from a file."""
        return self._text

    @property
    def pretty_text(self) -> str:
        """The config as indented Python assignments (what :meth:`dump` writes to ``.py``)."""
        return format_python(self._cfg_dict)

    def to_dict(self) -> dict:
        """The config as plain nested dicts, lists and tuples (a copy)."""
        return to_plain(self._cfg_dict)

    def merge_from_dict(self, options: Mapping[str, Any], allow_list_keys: bool = True) -> None:
        """Override values by dotted keys, e.g. from ``--cfg-options``.

        ``{"model.backbone.depth": 101}`` sets one value, creating missing dicts;
        ``{"data.pipeline.1.scale": (800, 600)}`` sets a key of element 1 of a list.
        A dict value is merged onto an existing dict (``_delete_=True`` replaces it).
        Either every option is applied or, on error, none is.

        Args:
            options: Mapping dotted key -> value.
            allow_list_keys: Let integer parts index into lists and tuples.

        Raises:
            TypeError: ``options`` is not a mapping or a key is not a str.
            ValueError: a key cannot be followed (see :func:`mmpar.config.config_dict.set_by_path`).
        """
        if not isinstance(options, Mapping):
            raise TypeError(
                "options: expected a mapping of dotted keys to values, got "
                f"{type(options).__name__}"
            )
        updated = copy.deepcopy(self._cfg_dict)
        for key, value in options.items():
            if not isinstance(key, str):
                raise TypeError(
                    f"options: keys must be dotted str keys, got {type(key).__name__} {key!r}"
                )
            set_by_path(updated, key, value, allow_list_keys)
        object.__setattr__(self, "_cfg_dict", updated)

    def dump(self, path: Optional[PathLike] = None) -> Optional[str]:
        """Write the config to a ``.py`` or ``.json`` file that :meth:`fromfile` reads back.

        A ``.py`` file keeps tuples; JSON turns them into lists.

        Args:
            path: The file to write (missing parent folders are created). When None,
                the Python text is returned instead.

        Returns:
            The Python text when ``path`` is None, else None.

        Raises:
            ValueError: an extension other than .py/.json, or a key that cannot be written.
            TypeError: a value that cannot be written; the message names its key.
        """
        if path is None:
            check_dumpable(self._cfg_dict, for_json=False)
            return self.pretty_text
        file = _as_path(path, "path")
        _check_extension(file, "path")
        for_json = file.suffix == ".json"
        check_dumpable(self._cfg_dict, for_json=for_json)
        file.parent.mkdir(parents=True, exist_ok=True)
        if for_json:
            file.write_text(json.dumps(self.to_dict(), indent=4) + "\n", encoding="utf-8")
        else:
            file.write_text(self.pretty_text, encoding="utf-8")
        return None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in self._OWN:
            raise AttributeError(name)
        return getattr(self._cfg_dict, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if hasattr(type(self), name):
            raise AttributeError(
                f"Config.{name} is not a config key; use cfg[{name!r}] = ... for one"
            )
        self._cfg_dict[name] = value

    def __delattr__(self, name: str) -> None:
        delattr(self._cfg_dict, name)

    def __getitem__(self, key: str) -> Any:
        return self._cfg_dict[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._cfg_dict[key] = value

    def __delitem__(self, key: str) -> None:
        del self._cfg_dict[key]

    def __contains__(self, key: object) -> bool:
        return key in self._cfg_dict

    def __iter__(self) -> Iterator[str]:
        return iter(self._cfg_dict)

    def __len__(self) -> int:
        return len(self._cfg_dict)

    def __eq__(self, other: object) -> bool:
        """Configs are equal when their contents are (file name and source text aside)."""
        if not isinstance(other, Config):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable, and equal by content

    def __getstate__(self) -> Dict[str, Any]:
        return {name: object.__getattribute__(self, name) for name in self._OWN}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        for name in self._OWN:
            object.__setattr__(self, name, state[name])

    def __str__(self) -> str:
        return self.pretty_text

    def __repr__(self) -> str:
        return f"Config(filename={self._filename!r}):\n{self.pretty_text}"
