"""Compose: run pipeline steps one after the other."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, List, Optional, Sequence, Union

from mmpar.registry import TRANSFORMS

__all__ = ["Compose"]

Step = Union[Callable[[dict], Optional[dict]], Mapping[str, Any]]


@TRANSFORMS.register_module()
class Compose:
    """A pipeline: each step takes the ``results`` dict and returns it (or a new one).

    A step that returns ``None`` drops the sample: the remaining steps are skipped
    and the pipeline returns ``None``. Datasets in training then load another index
    (of the same aspect group); in test mode they raise instead, since a test
    sample must not be lost.

    Args:
        transforms: Steps: transform objects, any callables, or config dicts
            (``dict(type="Resize", img_scale=(1333, 800))``) built from
            :data:`~mmpar.registry.TRANSFORMS`.

    Raises:
        TypeError: ``transforms`` is not a list, or a step is neither a callable nor
            a dict.
        KeyError: A config names an unregistered transform.
    """

    def __init__(self, transforms: Sequence[Step]) -> None:
        if isinstance(transforms, (str, Mapping)) or not isinstance(transforms, Sequence):
            raise TypeError(
                f"Compose: transforms must be a list of steps, got {type(transforms).__name__}"
            )
        self.transforms: List[Callable[[dict], Optional[dict]]] = []
        for i, step in enumerate(transforms):
            if isinstance(step, Mapping):
                step = TRANSFORMS.build(step)
            elif not callable(step):
                raise TypeError(
                    f"Compose: transforms[{i}] must be a callable or a config dict, got {type(step).__name__} {step!r}"
                )
            self.transforms.append(step)

    def __call__(self, results: dict) -> Optional[dict]:
        for step in self.transforms:
            results = step(results)
            if results is None:
                return None
        return results

    def __len__(self) -> int:
        return len(self.transforms)

    def __repr__(self) -> str:
        lines = "".join(f"    {step!r},\n" for step in self.transforms)
        return f"{type(self).__name__}([\n{lines}])"
