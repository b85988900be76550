"""Compose: run pipeline steps one after the other, and say what size they make an image.

A step may declare the size of the image it outputs with a method
``output_size(height, width) -> (height, width)``: given the ``(h, w)`` of the
image it receives, the ``(h, w)`` of the image array it returns. Datasets chain
these through :meth:`Compose.output_size` to know, before loading anything, the
size each image is batched at (``DetectionDataset.img_sizes``, used by the
size-aware samplers). Every built-in step declares it; steps that keep the size
can inherit :class:`KeepsSize`. A step that declares nothing (a plain function,
a user transform) is taken to keep the size: give a step that changes it an
``output_size`` method, or the sizes the samplers group by are wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

from mmpar.registry import TRANSFORMS
from mmpar.utils.checks import is_int

__all__ = ["Compose", "KeepsSize", "step_output_size"]

Step = Union[Callable[[dict], Optional[dict]], Mapping[str, Any]]


class KeepsSize:
    """Base of the steps that never change the image size: declares it."""

    def output_size(self, height: int, width: int) -> Tuple[int, int]:
        """The image keeps its size: ``(height, width)``."""
        return height, width


def step_output_size(step: Any, height: int, width: int) -> Tuple[int, int]:
    """The ``(height, width)`` of the image ``step`` returns for a ``height x width`` one.

    Uses the step's ``output_size`` method; a step without one is taken to keep
    the size (see the module docstring).

    Raises:
        TypeError: ``output_size`` returned something other than a pair of ints.
        ValueError: It returned sizes below 1.
    """
    declare = getattr(step, "output_size", None)
    if not callable(declare):
        return height, width
    size = declare(height, width)
    if not isinstance(size, (tuple, list)) or len(size) != 2 or not all(map(is_int, size)):
        raise TypeError(
            f"{type(step).__name__}.output_size({height}, {width}): expected an (h, w) pair "
            f"of ints, got {size!r}"
        )
    if min(size) < 1:
        raise ValueError(
            f"{type(step).__name__}.output_size({height}, {width}): expected sizes >= 1, "
            f"got {tuple(size)}"
        )
    return int(size[0]), int(size[1])


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
                    f"Compose: transforms[{i}] must be a callable or a config dict, "
                    f"got {type(step).__name__} {step!r}"
                )
            self.transforms.append(step)
        _defer_normalize(self.transforms)

    def __call__(self, results: dict) -> Optional[dict]:
        for step in self.transforms:
            results = step(results)
            if results is None:
                return None
        return results

    def output_size(self, height: int, width: int) -> Tuple[int, int]:
        """The ``(height, width)`` of the image after every step, for one of ``height x width``.

        Chains each step's declared ``output_size`` (see the module docstring);
        steps that declare nothing keep the size.
        """
        for step in self.transforms:
            height, width = step_output_size(step, height, width)
        return height, width

    def __len__(self) -> int:
        return len(self.transforms)

    def __repr__(self) -> str:
        lines = "".join(f"    {step!r},\n" for step in self.transforms)
        return f"{type(self).__name__}([\n{lines}])"


def _defer_normalize(steps: List[Any]) -> None:
    """Replace a step that can defer its work to collate (``Normalize``, see
    :meth:`~mmpar.data.transforms.Normalize.deferred`) by its deferred twin when
    every later step only moves pixels (declares ``forwards_raw_pixels``) and one
    of them packs the work into the image's container (``packs_raw_pixels``)."""
    for i, step in enumerate(steps):
        later = steps[i + 1 :]
        if (
            callable(getattr(step, "deferred", None))
            and later
            and all(getattr(s, "forwards_raw_pixels", False) for s in later)
            and any(getattr(s, "packs_raw_pixels", False) for s in later)
        ):
            steps[i] = step.deferred()
