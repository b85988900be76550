"""BatchSamplerLoader: a DataLoader whose ``sampler`` reaches its batch sampler's epoch.

mmcv 1.x finds the epoch of a loader in two places: ``DistSamplerSeedHook``
calls ``loader.sampler.set_epoch(epoch)`` when ``loader.sampler`` has it and
``loader.batch_sampler.sampler.set_epoch(epoch)`` otherwise, and
``IterLoader`` calls only ``loader.sampler.set_epoch(epoch)``, silently doing
nothing when it is missing. Given a ``batch_sampler``, a plain ``DataLoader``
fills ``loader.sampler`` with a ``SequentialSampler`` that it never reads
(batches come from the batch sampler alone), so the first path misses the
epoch and ``IterLoader`` would replay the same order every pass.
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader

__all__ = ["BatchSamplerLoader"]


class BatchSamplerLoader(DataLoader):
    """A ``DataLoader`` over a batch sampler that shows ``batch_sampler.sampler`` as ``sampler``.

    The batch sampler must expose an index-level ``sampler`` with ``set_epoch``
    (every batch sampler of :mod:`mmpar.data.samplers` does: a view whose
    ``set_epoch`` is the batch sampler's own). ``loader.sampler`` is then that
    object, so ``loader.sampler.set_epoch(e)``,
    ``loader.batch_sampler.sampler.set_epoch(e)`` and
    ``loader.batch_sampler.set_epoch(e)`` all select the same epoch.
    Iteration, length and workers are exactly those of ``DataLoader``: with a
    batch sampler it reads only ``batch_sampler``.

    Args:
        dataset: Map-style dataset.
        batch_sampler: Yields lists of indices; has ``.sampler.set_epoch``.
        **kwargs: Any other ``DataLoader`` argument except ``sampler``,
            ``batch_size``, ``shuffle`` and ``drop_last`` (which
            ``DataLoader`` refuses next to a batch sampler).

    Raises:
        TypeError: ``batch_sampler`` has no ``sampler`` with ``set_epoch``.
    """

    def __init__(self, dataset: Any, batch_sampler: Any, **kwargs: Any) -> None:
        index_sampler = getattr(batch_sampler, "sampler", None)
        if not callable(getattr(index_sampler, "set_epoch", None)):
            raise TypeError(
                "BatchSamplerLoader: batch_sampler must have a .sampler with set_epoch, got "
                f"{type(batch_sampler).__name__} whose .sampler is {type(index_sampler).__name__}"
            )
        super().__init__(dataset, batch_sampler=batch_sampler, **kwargs)
        # DataLoader guards `sampler` against assignment after __init__; the
        # default it stored is unused with a batch sampler (it reads
        # `_index_sampler`, i.e. `batch_sampler`), so replacing it changes
        # nothing but what hooks see.
        object.__setattr__(self, "sampler", index_sampler)
