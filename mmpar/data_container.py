"""DataContainer: how one field of one sample is batched and moved."""

from __future__ import annotations

import operator
import sys
from typing import Any, Callable, Optional, Sequence, Tuple, Union

import torch

from mmpar.batch_buffer import BatchBuffer, Slot, Spec, chunk_data, matches, strip
from mmpar.pinning import pin_structure
from mmpar.pixel_norm import PixelNorm
from mmpar.utils.checks import is_int, is_number

__all__ = ["DataContainer", "as_container", "container_classes"]

_PAD_DIMS = (None, 1, 2, 3)


def _check_pad_dims(pad_dims: Any) -> Optional[int]:
    """``pad_dims`` as a plain int (numpy ints welcome), or None.

    ``1.0 in (1, 2, 3)`` is true, so integrality is checked with ``operator.index``.
    """
    if pad_dims is None:
        return None
    try:
        value = operator.index(pad_dims)
    except TypeError:
        value = None
    if isinstance(pad_dims, bool) or value not in _PAD_DIMS[1:]:
        raise ValueError(f"DataContainer: pad_dims must be None, 1, 2 or 3, got {pad_dims!r}")
    return value


class DataContainer:
    """Wraps one field of a sample and says how :func:`mmpar.collate` batches it
    and how :func:`mmpar.scatter` moves it.

    Three kinds of field:

    =====================  ===================  =====================================
    kind                   flags                batched as (per chunk)
    =====================  ===================  =====================================
    metadata               ``cpu_only=True``    list of the samples' data; never moved
    images, masks, maps    ``stack=True``       one tensor ``(N, *lead, *padded)``
    boxes, labels          neither              list of the samples' tensors
    =====================  ===================  =====================================

    A stacked field of ``N`` samples with shapes ``(*lead, s_1, ..., s_k)`` (``k`` =
    ``pad_dims``) becomes one tensor of shape ``(N, *lead, p_1, ..., p_k)`` where
    ``p_j`` is the largest ``s_j`` in the chunk, rounded up to a multiple of
    ``size_divisor`` when given. Padding goes at the end of each padded dimension
    (bottom / right) and is filled with each sample's ``padding_value``.

    After :func:`mmpar.collate`, ``data`` is a list with one entry per chunk of
    ``samples_per_gpu`` samples, and the flags are those of the first sample.
    The tensors of a collated batch are views of one
    :class:`~mmpar.batch_buffer.BatchBuffer` (see :attr:`buffer`), which is how
    the batch is pickled, pinned and scattered: one storage, one copy. Writing a
    view in place writes the batch; a view never overlaps another. Keeping one
    view alive keeps the whole batch's storage alive: ``.clone()`` what you keep.

    Args:
        data: The wrapped value: a tensor, a list of tensors, a dict of metadata...
        stack: Pad and stack the samples' tensors into one tensor per chunk.
        padding_value: Value written into the padded margins when stacking.
        cpu_only: Metadata: batched as a list and never moved to a device.
        pad_dims: ``None`` (shapes must already agree), or 1, 2 or 3: the number of
            trailing dimensions padded when stacking.
        size_divisor: With ``stack=True`` and an integer ``pad_dims``, pad each
            padded dimension up to a multiple of this (e.g. 32 for FPN backbones).
        pixel_norm: With ``stack=True``, a ``(C, H, W)`` tensor of raw pixels and
            how to normalize them (:class:`~mmpar.pixel_norm.PixelNorm`):
            :func:`mmpar.collate` writes the normalized float32 image straight
            into the batch, and :attr:`data` is that image (made on first use);
            :attr:`raw_data` is what was given. Containers made from this one
            with :meth:`with_data` hold other data and drop it.

    Raises:
        ValueError: ``pad_dims`` outside {None, 1, 2, 3}; ``size_divisor`` that is
            not a positive integer, or given without ``stack=True`` and an integer
            ``pad_dims``; ``pixel_norm`` without ``stack=True`` or with data it
            does not fit.
        TypeError: ``padding_value`` that is not a number; ``pixel_norm`` that is
            not a PixelNorm, or around data that is not a tensor.
    """

    #: What is pickled, in order (a collated container adds its buffer and specs).
    _FLAGS = (
        "_data",
        "_stack",
        "_padding_value",
        "_cpu_only",
        "_pad_dims",
        "_size_divisor",
        "_pixel_norm",
    )
    __slots__ = _FLAGS + ("_normalized", "_buffer", "_specs", "_built")

    def __init__(
        self,
        data: Any,
        stack: bool = False,
        padding_value: Union[int, float] = 0,
        cpu_only: bool = False,
        pad_dims: Optional[int] = 2,
        size_divisor: Optional[int] = None,
        pixel_norm: Optional[PixelNorm] = None,
    ) -> None:
        pad_dims = _check_pad_dims(pad_dims)
        if pixel_norm is not None:
            _check_pixel_norm(pixel_norm, data, stack)
        # numbers.Real also admits numpy scalars such as ``np.float32(0.5)``.
        if not is_number(padding_value):
            raise TypeError(
                "DataContainer: padding_value must be an int or float, got "
                f"{type(padding_value).__name__}"
            )
        if size_divisor is not None:
            if not is_int(size_divisor) or size_divisor < 1:
                raise ValueError(
                    "DataContainer: size_divisor must be a positive int or None, got "
                    f"{size_divisor!r}"
                )
            if not stack or pad_dims is None:
                raise ValueError(
                    "DataContainer: size_divisor needs stack=True and an integer pad_dims, "
                    f"got stack={stack!r}, pad_dims={pad_dims!r}"
                )
        self._data = data
        self._stack = bool(stack)
        self._padding_value = padding_value
        self._cpu_only = bool(cpu_only)
        self._pad_dims = pad_dims
        self._size_divisor = size_divisor
        self._pixel_norm = pixel_norm
        self._normalized: Optional[torch.Tensor] = None
        self._buffer: Optional[BatchBuffer] = None
        self._specs: Tuple[Spec, ...] = ()
        self._built: Tuple[Any, ...] = ()

    # Pickling: __slots__ classes need explicit state (DataLoader workers pickle us).
    # A buffered container sends its buffer (one storage, shared through pickle's
    # memo by every container of the batch) and the specs, not its views.
    def __getstate__(self) -> tuple:
        state = tuple(getattr(self, name) for name in self._FLAGS)
        buffered = self.buffer
        if buffered is None:
            return state
        buffer, specs = buffered
        raws = [strip(d, s) for d, s in zip(self._data, specs)]
        return (raws,) + state[1:] + (buffer, specs)

    def __setstate__(self, state: tuple) -> None:
        self._pixel_norm = None  # absent from the state of older versions
        for name, value in zip(self._FLAGS, state):
            object.__setattr__(self, name, value)
        self._normalized = None
        self._buffer, self._specs, self._built = None, (), ()
        if len(state) > len(self._FLAGS):  # only collated containers, which have no pixel_norm
            buffer, specs = state[len(self._FLAGS) :]
            self._attach(buffer, specs, chunk_data(buffer, specs, self._data))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.data!r})"

    def __len__(self) -> int:
        return len(self._data)

    @property
    def data(self) -> Any:
        """The wrapped value (after collate: a list with one entry per chunk); with a
        :attr:`pixel_norm`, the normalized float32 image."""
        if self._pixel_norm is None:
            return self._data
        if self._normalized is None:
            self._normalized = self._pixel_norm.apply(self._data)
        return self._normalized

    @property
    def raw_data(self) -> Any:
        """The value as given: with a :attr:`pixel_norm`, the raw pixels; else :attr:`data`."""
        return self._data

    @property
    def pixel_norm(self) -> Optional[PixelNorm]:
        """How collate normalizes the raw pixels as it stacks them, or None."""
        return self._pixel_norm

    @property
    def datatype(self) -> Union[str, type]:
        """``tensor.type()`` (e.g. ``'torch.FloatTensor'``) for a tensor, else ``type(data)``."""
        if self._pixel_norm is not None:
            return "torch.FloatTensor"
        if isinstance(self._data, torch.Tensor):
            return self._data.type()
        return type(self._data)

    @property
    def cpu_only(self) -> bool:
        return self._cpu_only

    @property
    def stack(self) -> bool:
        return self._stack

    @property
    def padding_value(self) -> Union[int, float]:
        return self._padding_value

    @property
    def pad_dims(self) -> Optional[int]:
        return self._pad_dims

    @property
    def size_divisor(self) -> Optional[int]:
        return self._size_divisor

    # ``size`` and ``dim`` exist only for tensor data, so ``hasattr(dc, "size")``
    # tells whether the container holds a tensor.
    @property
    def size(self) -> Callable[..., Any]:
        return self._tensor_method("size")

    @property
    def dim(self) -> Callable[[], int]:
        return self._tensor_method("dim")

    def _tensor_method(self, name: str) -> Callable[..., Any]:
        if not isinstance(self._data, torch.Tensor):
            raise AttributeError(
                f"DataContainer.{name}() needs tensor data, this one holds "
                f"{type(self._data).__name__}"
            )
        return getattr(self._data, name)  # a PixelNorm keeps the shape

    def with_data(self, data: Any) -> "DataContainer":
        """A container with the same flags around other data (without :attr:`pixel_norm`,
        which describes this container's own raw pixels)."""
        return DataContainer(
            data,
            stack=self._stack,
            padding_value=self._padding_value,
            cpu_only=self._cpu_only,
            pad_dims=self._pad_dims,
            size_divisor=self._size_divisor,
        )

    def with_buffer(
        self, buffer: BatchBuffer, specs: Sequence[Spec], raws: Sequence[Any]
    ) -> "DataContainer":
        """A container with the same flags whose data is cut from ``buffer``.

        Args:
            buffer: The batch's buffer.
            specs: Where each chunk's data sits in its chunk's bytes (``None``: not
                in the buffer).
            raws: Each chunk's data outside the buffer (see
                :func:`~mmpar.batch_buffer.strip`).
        """
        out = self.with_data(None)
        out._attach(buffer, specs, chunk_data(buffer, specs, raws))
        return out

    def _attach(self, buffer: BatchBuffer, specs: Sequence[Spec], data: list) -> None:
        self._data = data
        self._buffer, self._specs = buffer, tuple(specs)
        self._built = tuple(
            d if isinstance(s, Slot) or s is None else tuple(d) for d, s in zip(data, specs)
        )

    @property
    def buffer(self) -> Optional[Tuple[BatchBuffer, Tuple[Spec, ...]]]:
        """``(buffer, specs)`` when :func:`mmpar.collate` laid this container's tensors
        out in one :class:`~mmpar.batch_buffer.BatchBuffer` and ``data`` still holds
        the views it cut (the same tensors in the same lists); else None, and the
        container is pickled, pinned and moved tensor by tensor."""
        if self._buffer is None:
            return None
        data = self._data
        if type(data) is not list or len(data) != len(self._specs):
            return None
        if all(map(matches, data, self._built, self._specs)):
            return self._buffer, self._specs
        return None

    def pin_memory(self) -> "DataContainer":
        """A container whose tensors (and registered types) sit in pinned memory.

        ``cpu_only`` data is returned as it is. A buffered container pins its
        batch's buffer, once for all the batch's containers, in one copy.
        ``DataLoader(pin_memory=True)`` calls this on every container of a batch.
        """
        if self._cpu_only:
            return self
        buffered = self.buffer
        if buffered is None:
            return self.with_data(pin_structure(self.data))
        buffer, specs = buffered
        raws = [pin_structure(strip(d, s)) for d, s in zip(self._data, specs)]
        return self.with_buffer(buffer.pinned(), specs, raws)


def _check_pixel_norm(pixel_norm: Any, data: Any, stack: bool) -> None:
    if not isinstance(pixel_norm, PixelNorm):
        raise TypeError(
            f"DataContainer: pixel_norm must be a PixelNorm, got {type(pixel_norm).__name__}"
        )
    if not stack:
        raise ValueError("DataContainer: pixel_norm needs stack=True, got stack=False")
    pixel_norm.check(data, "DataContainer")


#: Where mmcv 1.x keeps its DataContainer. Looked up in ``sys.modules`` only:
#: mmpar never imports mmcv, it adopts mmcv's containers once mmcv has loaded them.
_MMCV_MODULE = "mmcv.parallel.data_container"
_classes: Tuple[type, ...] = (DataContainer,)


def container_classes() -> Tuple[type, ...]:
    """The classes :func:`as_container` accepts: mmpar's :class:`DataContainer`
    first, then mmcv 1.x's once ``mmcv.parallel`` has been imported.

    mmcv's class is remembered once seen, so its instances stay recognised after
    :func:`mmpar.compat.patch_mmcv` points ``mmcv.parallel`` at mmpar.
    """
    global _classes
    module = sys.modules.get(_MMCV_MODULE)
    if module is not None:
        cls = getattr(module, "DataContainer", None)
        if cls is not DataContainer and cls not in _classes and isinstance(cls, type):
            _classes = _classes + (cls,)
    return _classes


def as_container(obj: Any) -> Optional[DataContainer]:
    """``obj`` as an mmpar :class:`DataContainer`, or None if it is no container.

    An mmpar container is returned as it is. An mmcv 1.x
    ``mmcv.parallel.DataContainer`` (what mmdet 2.x pipelines emit) becomes an
    mmpar container around the same ``data`` (not copied) with the same
    ``stack``, ``padding_value``, ``cpu_only`` and ``pad_dims``.

    Raises:
        ValueError: An mmcv container whose flags mmpar cannot hold (e.g. a
            ``pad_dims`` outside {None, 1, 2, 3}); the message names the flag.
        TypeError: An mmcv container whose ``padding_value`` is not a number.
    """
    if isinstance(obj, DataContainer):
        return obj
    classes = container_classes()
    if len(classes) == 1 or not isinstance(obj, classes):
        return None
    try:
        return DataContainer(
            obj.data,
            stack=obj.stack,
            padding_value=obj.padding_value,
            cpu_only=obj.cpu_only,
            pad_dims=obj.pad_dims,
        )
    except (TypeError, ValueError) as err:
        raise type(err)(f"cannot adopt {type(obj).__module__}.{type(obj).__name__}: {err}") from err
