"""Registry: map string names to classes or functions and build objects from configs.

A config names what to build by its ``type`` key::

    MODELS = Registry("model")

    @MODELS.register_module()
    class RetinaNet:
        def __init__(self, depth: int = 50) -> None: ...

    model = MODELS.build(dict(type="RetinaNet", depth=101))

Registries form a tree. A child is created with a ``parent`` and a ``scope``; it
sees its own entries first and falls back to its parent's. ``"scope.Name"`` looks
``Name`` up in the registry of that scope.

A registry can name the modules that fill it (``locations``): they are imported,
by name, the first time the registry is asked for something it lacks or is
listed, so that a root registry knows its package's classes without the package
importing them all up front.
"""

from __future__ import annotations

import difflib
import importlib
from types import MappingProxyType
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from mmpar.utils.exceptions import with_prefix

__all__ = ["Registry", "check_build_cfg", "did_you_mean"]


def did_you_mean(name: str, known: Sequence[str]) -> str:
    """``"did you mean 'AdamW'? "`` for the names of ``known`` closest to ``name``, or ``""``.

    Case is ignored in the comparison, so ``"Adamw"`` finds ``"AdamW"``.
    """
    by_lower: Dict[str, List[str]] = {}
    for k in known:
        by_lower.setdefault(k.lower(), []).append(k)
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.6)
    names = [k for lower in close for k in by_lower[lower]][:3]
    if not names:
        return ""
    return f"did you mean {' or '.join(repr(n) for n in names)}? "


class Registry:
    """A named table of classes and functions that configs can refer to by name.

    Args:
        name: Name of the registry, used in error messages (e.g. ``"model"``).
        parent: Registry to fall back to when a name is not found here. The new
            registry is entered as ``parent.children[scope]``.
        scope: Name of this registry within its parent; required with ``parent``.
            ``"scope.Name"`` keys select the registry with this scope.
        locations: Names of the modules that register into this registry (e.g.
            ``("mmpar.models",)``). They are imported once, the first time a lookup
            misses or the registry is listed (``module_dict``, ``len``, ``repr``,
            :meth:`all_modules`); registering does not import them.

    Raises:
        TypeError: ``name`` or ``scope`` is not a str, ``parent`` is not a Registry,
            or ``locations`` is not a sequence of str.
        ValueError: ``name`` is empty, ``scope`` is empty or contains ``"."``, a
            parent is given without a scope, or the parent already has a child of
            that scope.
    """

    def __init__(
        self,
        name: str,
        parent: Optional["Registry"] = None,
        scope: Optional[str] = None,
        locations: Sequence[str] = (),
    ) -> None:
        if not isinstance(name, str):
            raise TypeError(f"Registry name: expected a str, got {type(name).__name__} {name!r}")
        if not name:
            raise ValueError("Registry name: expected a non-empty str, got ''")
        if parent is not None and not isinstance(parent, Registry):
            raise TypeError(
                f"Registry {name!r}: parent must be a Registry or None, got {type(parent).__name__}"
            )
        if scope is not None:
            if not isinstance(scope, str):
                raise TypeError(
                    f"Registry {name!r}: scope must be a str or None, got {type(scope).__name__}"
                )
            if not scope or "." in scope:
                raise ValueError(
                    f"Registry {name!r}: scope must be non-empty and contain no '.', got {scope!r}"
                )
        if parent is not None:
            if scope is None:
                raise ValueError(
                    f"Registry {name!r}: a child registry needs a scope (parent is {parent.name!r})"
                )
            if scope in parent._children:
                raise ValueError(
                    f"Registry {name!r}: parent registry {parent.name!r} already has a child with "
                    f"scope {scope!r}"
                )
        if isinstance(locations, str) or not all(isinstance(m, str) and m for m in locations):
            raise TypeError(
                f"Registry {name!r}: locations must be a list of module names, got {locations!r}"
            )
        self._name = name
        self._scope = scope
        self._locations: Tuple[str, ...] = tuple(locations)
        self._locations_imported = not self._locations
        self._parent = parent
        self._children: Dict[str, Registry] = {}
        self._modules: Dict[str, Any] = {}
        if parent is not None:
            parent._children[scope] = self  # type: ignore[index]

    @property
    def name(self) -> str:
        """Name of the registry."""
        return self._name

    @property
    def scope(self) -> Optional[str]:
        """Scope of this registry within its parent, or None."""
        return self._scope

    @property
    def parent(self) -> Optional["Registry"]:
        """Registry that lookups fall back to, or None for a root."""
        return self._parent

    @property
    def children(self) -> Mapping[str, "Registry"]:
        """Read-only mapping scope -> child registry."""
        return MappingProxyType(self._children)

    @property
    def locations(self) -> Tuple[str, ...]:
        """Names of the modules imported to fill this registry (see the class docstring)."""
        return self._locations

    @property
    def module_dict(self) -> Mapping[str, Any]:
        """Read-only mapping name -> object registered in this registry (not its parent)."""
        self.import_locations()
        return MappingProxyType(self._modules)

    def import_locations(self) -> None:
        """Import this registry's ``locations`` and its parents', once (no-op afterwards)."""
        reg: Optional[Registry] = self
        while reg is not None:
            if not reg._locations_imported:
                # Set first: a location that registers into this registry (or looks a
                # name up in it) while it is being imported must not import it again.
                reg._locations_imported = True
                for module in reg._locations:
                    importlib.import_module(module)
            reg = reg._parent

    def register_module(
        self,
        name: Optional[Union[str, Sequence[str]]] = None,
        force: bool = False,
        module: Optional[Union[type, Callable[..., Any]]] = None,
    ) -> Any:
        """Register a class or function, directly or as a decorator.

        ``@REG.register_module()``, ``@REG.register_module(name="X")`` and
        ``REG.register_module(module=cls)`` are all supported.

        Args:
            name: Name or list of names to register under; defaults to ``module.__name__``.
            force: Replace entries that already exist instead of raising.
            module: The class or function. When None, a decorator is returned.

        Returns:
            ``module`` itself when given, else a decorator that registers its
            argument and returns it unchanged.

        Raises:
            TypeError: ``name`` is not None, a str or a list of str; ``force`` is not a
                bool; ``module`` is not a class or callable.
            ValueError: a name is empty or contains ``"."`` (reserved for scopes).
            KeyError: a name is already registered and ``force`` is False.
        """
        if not isinstance(force, bool):
            raise TypeError(
                f"register_module: force must be a bool, got {type(force).__name__} {force!r}"
            )
        names = self._check_names(name)
        if module is not None:
            self._register(module, names, force)
            return module

        def decorator(obj: Any) -> Any:
            self._register(obj, names, force)
            return obj

        return decorator

    def _check_names(self, name: Optional[Union[str, Sequence[str]]]) -> Optional[List[str]]:
        if name is None:
            return None
        if isinstance(name, str):
            names = [name]
        elif isinstance(name, (list, tuple)) and all(isinstance(n, str) for n in name):
            names = list(name)
        else:
            raise TypeError(
                f"register_module: name must be None, a str or a list of str, got {name!r}"
            )
        for n in names:
            if not n or "." in n:
                raise ValueError(
                    f"register_module: a name must be non-empty and contain no '.', got {n!r}"
                )
        return names

    def _register(self, module: Any, names: Optional[List[str]], force: bool) -> None:
        if not (isinstance(module, type) or callable(module)):
            raise TypeError(
                "register_module: module must be a class or callable, got "
                f"{type(module).__name__} {module!r}"
            )
        if names is None:
            names = [getattr(module, "__name__", None) or type(module).__name__]
        if not force:
            # Check every name before inserting any, so a failure registers nothing.
            for n in names:
                if n in self._modules:
                    raise KeyError(
                        f"{n!r} is already registered in registry {self._name!r} "
                        f"(as {self._modules[n]!r}); pass force=True to replace it"
                    )
        for n in names:
            self._modules[n] = module

    def _root(self) -> "Registry":
        reg = self
        while reg._parent is not None:
            reg = reg._parent
        return reg

    def _find_scope(self, scope: str) -> Optional["Registry"]:
        """The registry with ``scope`` among this one and its descendants, or None."""
        if self._scope == scope:
            return self
        for child in self._children.values():
            found = child._find_scope(scope)
            if found is not None:
                return found
        return None

    def _lookup(self, key: str) -> Any:
        """The object for ``key`` (here, then in the parents), or raise KeyError."""
        for attempt in range(2):
            reg: Optional[Registry] = self
            while reg is not None:
                if key in reg._modules:
                    return reg._modules[key]
                reg = reg._parent
            if attempt == 0:
                self.import_locations()
        raise KeyError(key)

    def get(self, key: str) -> Any:
        """Look up a registered object.

        Args:
            key: ``"Name"`` (here, then in the parents) or ``"scope.Name"`` (in the
                registry with that scope: this one, a descendant or, failing those, any
                registry of the tree).

        Returns:
            The registered class or function.

        Raises:
            TypeError: ``key`` is not a str.
            KeyError: nothing is registered under ``key``; the message names the
                closest registered names ("did you mean ...?") and lists them all.
        """
        if not isinstance(key, str):
            raise TypeError(
                f"Registry {self._name!r}: key must be a str, got {type(key).__name__} {key!r}"
            )
        target: Optional[Registry] = self
        name = key
        if "." in key:
            scope, name = key.split(".", 1)
            target = self._find_scope(scope) or self._root()._find_scope(scope)
            if target is None:
                # A location may create the child registry of that scope.
                self.import_locations()
                target = self._find_scope(scope) or self._root()._find_scope(scope)
            if target is None:
                raise KeyError(
                    f"{key!r}: no registry with scope {scope!r} in the tree of registry "
                    f"{self._name!r}"
                )
        try:
            return target._lookup(name)
        except KeyError:
            known = target._visible_names()
            scope = f" (scope {target._scope!r})" if target._scope else ""
            raise KeyError(
                f"{key!r} is not registered in registry {target._name!r}{scope}; "
                f"{did_you_mean(name, known)}registered: {known}"
            ) from None

    def _visible_names(self) -> List[str]:
        self.import_locations()
        names: List[str] = []
        reg: Optional[Registry] = self
        while reg is not None:
            names.extend(n for n in reg._modules if n not in names)
            reg = reg._parent
        return sorted(names)

    def build(self, cfg: Mapping[str, Any], **default_args: Any) -> Any:
        """Build an object from a config.

        Args:
            cfg: Mapping with a ``"type"`` key, a registered name or the class or
                callable itself; every other key is a keyword argument. ``cfg`` is not
                modified.
            **default_args: Keyword arguments used where ``cfg`` has none of that name
                (``type`` too, when ``cfg`` has none).

        Returns:
            ``obj_cls(**kwargs)``.

        Raises:
            TypeError: ``cfg`` is not a mapping, or its type is neither a str nor a
                callable.
            KeyError: ``cfg`` has no ``"type"`` (and no default), or the type name is
                not registered.
            Exception: whatever the constructor raises, re-raised as the same type with
                the registry and type names prefixed to the message.
        """
        if not isinstance(cfg, Mapping):
            raise TypeError(
                f"Registry {self._name!r}: cfg must be a mapping (dict), got {type(cfg).__name__}"
            )
        kwargs = dict(cfg)
        for key, value in default_args.items():
            kwargs.setdefault(key, value)
        if "type" not in kwargs:
            raise KeyError(
                f"Registry {self._name!r}: cfg must contain the key 'type' naming what to build, "
                f"got keys {sorted(map(str, cfg))}"
            )
        obj_type = kwargs.pop("type")
        if isinstance(obj_type, str):
            obj_cls = self.get(obj_type)
            type_name = obj_type
        elif callable(obj_type):
            obj_cls = obj_type
            type_name = getattr(obj_type, "__name__", repr(obj_type))
        else:
            raise TypeError(
                f"Registry {self._name!r}: cfg['type'] must be a str or a class/callable, "
                f"got {type(obj_type).__name__} {obj_type!r}"
            )
        try:
            return obj_cls(**kwargs)
        except Exception as exc:
            new = with_prefix(exc, f"{self._name}.{type_name}")
            if new is exc:
                raise
            raise new from exc

    def all_modules(self) -> Iterator[Any]:
        """Yield each object registered here or in any descendant, once each."""
        self.import_locations()
        seen = set()
        stack: List[Registry] = [self]
        while stack:
            reg = stack.pop(0)
            for obj in reg._modules.values():
                if id(obj) not in seen:
                    seen.add(id(obj))
                    yield obj
            stack.extend(reg._children.values())

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            self.get(name)
        except KeyError:
            return False
        return True

    def __len__(self) -> int:
        self.import_locations()
        return len(self._modules)

    def __repr__(self) -> str:
        self.import_locations()
        scope = f", scope={self._scope!r}" if self._scope is not None else ""
        return f"Registry(name={self._name!r}{scope}, items={sorted(self._modules)})"


def check_build_cfg(cfg: Any, argument: str) -> Mapping[str, Any]:
    """``cfg`` itself, checked to be a dict with a ``type`` key.

    Args:
        cfg: The config to check.
        argument: What the config configures, for the message (e.g. ``"model"``).

    Raises:
        TypeError: ``cfg`` is not a mapping.
        KeyError: ``cfg`` has no ``type``.
    """
    if not isinstance(cfg, Mapping):
        raise TypeError(
            f"{argument}: expected a dict with a 'type' key, got {type(cfg).__name__} {cfg!r}"
        )
    if "type" not in cfg:
        raise KeyError(
            f"{argument}: expected a dict with a 'type' key, got keys {sorted(map(str, cfg))}"
        )
    return cfg
