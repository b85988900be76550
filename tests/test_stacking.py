"""pad_stack / padded_shape / empty_shared: shapes, content, filled margins, shared memory."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from mmpar.stacking import empty_shared, pad_stack, padded_shape


def test_private_shared_storage_constructor_still_exists() -> None:
    # empty_shared relies on this private torch API (as default_collate does).
    # If this fails, torch has removed or renamed it: update mmpar/stacking.py.
    assert hasattr(torch.UntypedStorage, "_new_shared"), (
        "torch.UntypedStorage._new_shared is gone in torch "
        f"{torch.__version__}; mmpar.stacking.empty_shared must use another shared-memory allocator"
    )


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.int64, torch.uint8, torch.bool]
)
@pytest.mark.parametrize("shape", [(2, 3), (0, 5), (4,), (1, 2, 3)])
def test_empty_shared(shape: tuple, dtype: torch.dtype) -> None:
    t = empty_shared(shape, dtype)
    assert t.shape == shape and t.dtype == dtype and t.device.type == "cpu"
    assert t.is_shared()
    t.fill_(1)
    assert t.eq(1).all()


def test_padded_shape() -> None:
    shapes = [(3, 4, 5), (3, 6, 2)]
    assert padded_shape(shapes, None) == (3, 4, 5)
    assert padded_shape(shapes, 1) == (3, 4, 5)
    assert padded_shape(shapes, 2) == (3, 6, 5)
    assert padded_shape(shapes, 3) == (3, 6, 5)
    assert padded_shape(shapes, 2, size_divisor=4) == (3, 8, 8)
    assert padded_shape([(7,)], 1, size_divisor=8) == (8,)


def _reference(
    tensors: list, pad_dims: int, values: list, size_divisor: int = None
) -> torch.Tensor:
    """Pad with F.pad (right/bottom), an independent reference."""
    target = padded_shape([t.shape for t in tensors], pad_dims, size_divisor)
    padded = []
    for t, v in zip(tensors, values):
        pad = []
        for d in reversed(range(t.dim() - pad_dims, t.dim())):
            pad += [0, target[d] - t.shape[d]]
        padded.append(F.pad(t, pad, value=v))
    return torch.stack(padded)


@pytest.mark.parametrize("pad_dims", [1, 2, 3])
@pytest.mark.parametrize("size_divisor", [None, 4])
def test_matches_reference_padding(pad_dims: int, size_divisor: int) -> None:
    g = torch.Generator().manual_seed(pad_dims)
    varied = [(3, 4, 5), (5, 1, 2), (1, 6, 3)]
    shapes = [(2, 7, 8, 9)[: 4 - pad_dims] + v[3 - pad_dims :] for v in varied]
    tensors = [torch.randn(s, generator=g) for s in shapes]
    values = [-1.0, 2.5, 0.0]
    out = pad_stack(tensors, pad_dims, values, size_divisor)
    assert torch.equal(out, _reference(tensors, pad_dims, values, size_divisor))


def test_margins_filled_and_content_copied() -> None:
    a = torch.arange(6, dtype=torch.int32).view(2, 3)
    b = torch.arange(4, dtype=torch.int32).view(4, 1)
    out = pad_stack([a, b], 2, [-1, -2])
    assert out.shape == (2, 4, 3) and out.dtype == torch.int32
    assert torch.equal(out[0, :2], a) and (out[0, 2:] == -1).all()
    assert torch.equal(out[1, :, :1], b) and (out[1, :, 1:] == -2).all()
    a.add_(100)  # a copy, not a view
    assert out[0, 0, 0] == 0


def test_single_padding_value_and_no_padding_needed() -> None:
    ts = [torch.ones(2, 2), torch.ones(2, 2) * 2]
    assert torch.equal(pad_stack(ts, 2, 9), torch.stack(ts))
    assert torch.equal(pad_stack(ts, None), torch.stack(ts))


def test_zero_sized_and_non_contiguous_inputs() -> None:
    base = torch.arange(12.0).view(3, 4)
    out = pad_stack([base.t(), torch.zeros(0, 2)], 2, 5)
    assert out.shape == (2, 4, 3)
    assert torch.equal(out[0], base.t())
    assert (out[1] == 5).all()


def test_every_element_written_once() -> None:
    # The margin slabs must cover exactly the outside of the content: with NaN
    # padding, the number of NaNs equals the number of padded elements.
    for h, w, d in itertools.product([1, 3], [2, 4], [1, 2]):
        t = torch.zeros(d, h, w)
        out = pad_stack([t, torch.zeros(2, 4, 4)], 3, [float("nan"), 0.0])
        assert out[0].isnan().sum() == out[0].numel() - t.numel()


def test_not_in_shared_memory_outside_workers() -> None:
    assert not pad_stack([torch.ones(1, 2)], 2).is_shared()


@pytest.mark.parametrize(
    "tensors, pad_dims, exc, pattern",
    [
        ([], 2, ValueError, "nothing to stack"),
        ([torch.zeros(2), [1]], 1, TypeError, "needs tensors, sample 1 holds list"),
        ([torch.zeros(2, 2)], 3, ValueError, "pad_dims=3 needs tensors of at least 3 dimensions"),
        (
            [torch.zeros(1, 2, 2), torch.zeros(2, 2, 2)],
            2,
            ValueError,
            "dimensions before the last 2 must agree",
        ),
        ([torch.zeros(2, 2), torch.zeros(2, 2, 1)], 1, ValueError, "must agree"),
        ([torch.zeros(2), torch.zeros(2, dtype=torch.int64)], 1, ValueError, "dtypes must agree"),
    ],
)
def test_errors_name_the_field(tensors: list, pad_dims: int, exc: type, pattern: str) -> None:
    with pytest.raises(exc, match=f"my_field: .*{pattern}"):
        pad_stack(tensors, pad_dims, field="my_field")


def test_padding_values_of_the_wrong_length() -> None:
    with pytest.raises(ValueError, match="padding_values"):
        pad_stack([torch.ones(2, 2), torch.ones(1, 1)], 2, [5])


def test_large_batches_are_backed_by_a_private_mapping_and_freed_with_the_tensor() -> None:
    import gc
    import weakref

    from mmpar.stacking import HUGE_PAGE_MIN_BYTES, empty_large

    numel = HUGE_PAGE_MIN_BYTES // 4 + 1
    out = empty_large((numel,), torch.float32)
    assert out.shape == (numel,) and out.dtype == torch.float32 and out.is_contiguous()
    out.fill_(3.0)  # writable, every page
    assert float(out[-1]) == 3.0 and float(out.sum()) == 3.0 * numel
    small = empty_large((4, 4), torch.uint8)
    assert small.shape == (4, 4) and small.dtype == torch.uint8
    storage_ref = weakref.ref(out.untyped_storage())
    del out
    gc.collect()
    assert storage_ref() is None


def test_collate_of_a_large_batch_pads_like_a_small_one() -> None:
    from mmpar.stacking import HUGE_PAGE_MIN_BYTES

    side = int((HUGE_PAGE_MIN_BYTES / 2) ** 0.5) + 8  # two uint8 images make the batch large
    a = torch.full((1, side, side), 7, dtype=torch.uint8)
    b = torch.full((1, side - 5, side - 3), 9, dtype=torch.uint8)
    out = pad_stack([a, b], 2, [0, 255])
    assert out.numel() * out.element_size() >= HUGE_PAGE_MIN_BYTES
    assert bool((out[0] == 7).all())
    assert bool((out[1, :, : side - 5, : side - 3] == 9).all())
    assert bool((out[1, :, side - 5 :, :] == 255).all()) and bool(
        (out[1, :, :, side - 3 :] == 255).all()
    )
